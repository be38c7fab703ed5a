#!/usr/bin/env bash
# Prints the kind of CPU the parity goldens are recorded for (avx512 or
# avx2): the kernels ggml builds for this machine (GGML_NATIVE) sum in a
# different order on each, which can break a near tie in greedy decoding the
# other way. tests/testing/test_models.cpp (goldens_cpu_kind) picks the same
# folder from ggml's own report.
if grep -qw avx512f /proc/cpuinfo; then echo avx512; else echo avx2; fi
