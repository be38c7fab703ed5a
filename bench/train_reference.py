#!/usr/bin/env python3
"""A LoRA trainer in PyTorch: the reference `graft train` is checked against.

It reads the same GGUF (every tensor dequantized to F32 with the gguf-py of
the bundled llama.cpp tree) and implements the llama and qwen2/qwen3 blocks
as graft and llama.cpp compute them (RMS norm, NORM / NEOX rope with llama3
frequency factors, grouped-query attention, SwiGLU), with LoRA pairs
y += scale * B (A x) on the adapted projections, a loss that is the mean
cross entropy over every target token of a step, and torch.optim.AdamW.

Two modes:

  replay RUN_DIR [--out FILE]
      Repeats a graft run made with `graft train ... --save-init`: the run
      folder's config.json (model, rank, scale, targets, layers, AdamW and
      schedule settings), init.safetensors (the initial A and B) and
      batches.jsonl (every step's micro-batches). Prints one loss per step;
      --out writes them as JSON ({"losses": [...], ...}).

  bench --model GGUF --seq N [--steps K --rank R --threads T]
      Trains rank-R LoRA on all seven projections of every layer, batch 1,
      on random tokens of length N, and prints one JSON line: train tokens/s
      over steps 2..K (the first warms up) and the peak RSS.

Needs Debian's PyTorch and NumPy: `apt-get install python3-torch` (run it
with Debian's /usr/bin/python3). Never part of graft's test command.
"""
import argparse
import json
import math
import os
import resource
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".deps", "llama.cpp", "gguf-py"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import gguf  # noqa: E402

TARGETS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
PEFT_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(value).decode("utf-8")
    return value.tolist()[0]


class Model:
    """A frozen GGUF model in F32 torch tensors."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.arch = field(r, "general.architecture")
        a = self.arch + "."
        self.n_embd = field(r, a + "embedding_length")
        self.n_layer = field(r, a + "block_count")
        self.n_head = field(r, a + "attention.head_count")
        self.n_head_kv = field(r, a + "attention.head_count_kv", self.n_head)
        self.head_dim = field(r, a + "attention.key_length", self.n_embd // self.n_head)
        self.eps = field(r, a + "attention.layer_norm_rms_epsilon")
        self.freq_base = field(r, a + "rope.freq_base", 10000.0)
        factor = field(r, a + "rope.scaling.factor", None) or field(r, a + "rope.scale_linear", None)
        self.freq_scale = 1.0 / factor if factor else 1.0
        self.neox = self.arch in ("qwen2", "qwen3")
        self.w = {}
        for t in r.tensors:
            values = gguf.dequantize(t.data, t.tensor_type)
            shape = [int(x) for x in reversed(t.shape.tolist())]
            self.w[t.name] = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32).reshape(shape))
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]
        self.n_vocab = self.w["token_embd.weight"].shape[0]

    def rope(self, x, positions):
        """x: [B, L, H, D]; rotates with ggml's NORM (pairs 2i, 2i+1) or NEOX (i, i + D/2) layout."""
        d = self.head_dim
        inv = self.freq_scale * self.freq_base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        if "rope_freqs.weight" in self.w:
            inv = inv / self.w["rope_freqs.weight"].double()
        theta = positions.double()[:, None] * inv[None, :]  # [L, D/2]
        cos = torch.cos(theta).float()[None, :, None, :]
        sin = torch.sin(theta).float()[None, :, None, :]
        if self.neox:
            x0, x1 = x[..., : d // 2], x[..., d // 2:]
            return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def norm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def forward(self, tokens, lora, scale):
        """tokens: [B, L] -> logits [B, L, V]. lora: {(layer, target): (A [r, n_in], B [n_out, r])}."""
        B, L = tokens.shape
        w = self.w
        positions = torch.arange(L)
        mask = torch.full((L, L), float("-inf")).triu(1)
        x = w["token_embd.weight"][tokens]
        for il in range(self.n_layer):
            p = "blk.%d." % il

            def linear(h, target, bias=None):
                y = h @ w[p + target + ".weight"].t()
                if bias is not None:
                    y = y + bias
                pair = lora.get((il, target))
                if pair is not None:
                    y = y + scale * ((h @ pair[0].t()) @ pair[1].t())
                return y

            h = self.norm(x, w[p + "attn_norm.weight"])
            q = linear(h, "attn_q", w.get(p + "attn_q.bias"))
            k = linear(h, "attn_k", w.get(p + "attn_k.bias"))
            v = linear(h, "attn_v", w.get(p + "attn_v.bias"))
            q = q.view(B, L, self.n_head, self.head_dim)
            k = k.view(B, L, self.n_head_kv, self.head_dim)
            v = v.view(B, L, self.n_head_kv, self.head_dim)
            if p + "attn_q_norm.weight" in w:
                q = self.norm(q, w[p + "attn_q_norm.weight"])
                k = self.norm(k, w[p + "attn_k_norm.weight"])
            q = self.rope(q, positions)
            k = self.rope(k, positions)
            group = self.n_head // self.n_head_kv
            k = k.repeat_interleave(group, dim=2)
            v = v.repeat_interleave(group, dim=2)
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.head_dim) + mask
            attn = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)
            x = x + linear(attn.reshape(B, L, -1), "attn_output")
            h = self.norm(x, w[p + "ffn_norm.weight"])
            x = x + linear(torch.nn.functional.silu(linear(h, "ffn_gate")) * linear(h, "ffn_up"), "ffn_down")
        return self.norm(x, w["output_norm.weight"]) @ w["output.weight"].t()


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[start:end], dtype=np.float32).copy()).view(info["shape"])
    return out


def lr_at(c, step, total):
    if c["warmup_steps"] > 0 and step <= c["warmup_steps"]:
        return c["learning_rate"] * step / c["warmup_steps"]
    if c["lr_schedule"] == "constant":
        return c["learning_rate"]
    span = max(1, total - c["warmup_steps"])
    progress = min(1.0, max(0.0, (step - c["warmup_steps"]) / span))
    return c["min_lr"] + 0.5 * (c["learning_rate"] - c["min_lr"]) * (1.0 + math.cos(math.pi * progress))


def step_loss(model, lora, scale, micro_batches):
    """Backpropagates the step's mean target loss; returns it."""
    total_targets = sum(int(np.sum(np.array(m["targets"])[:, 1:])) for m in micro_batches)
    loss_sum = 0.0
    for m in micro_batches:
        tokens = torch.tensor(m["tokens"], dtype=torch.long)
        targets = torch.tensor(m["targets"], dtype=torch.bool)
        logits = model.forward(tokens, lora, scale)
        pred = logits[:, :-1][targets[:, 1:]]
        labels = tokens[:, 1:][targets[:, 1:]]
        ce = torch.nn.functional.cross_entropy(pred, labels, reduction="sum")
        (ce / total_targets).backward()
        loss_sum += ce.item()
    return loss_sum / max(1, total_targets)


def replay(args):
    torch.set_num_threads(args.threads)
    config = json.load(open(os.path.join(args.run_dir, "config.json")))
    c = config["train"]
    model = Model(c["model"])
    init = read_safetensors(os.path.join(args.run_dir, "init.safetensors"))
    lora = {}
    for name, tensor in init.items():
        blk, layer, target, which = name.split(".")
        key = (int(layer), target)
        pair = lora.setdefault(key, [None, None])
        pair[0 if which == "lora_a" else 1] = tensor.clone().requires_grad_(True)
    params = [t for pair in lora.values() for t in pair]
    opt = torch.optim.AdamW(params, lr=c["learning_rate"], betas=(c["beta1"], c["beta2"]), eps=c["adam_eps"],
                            weight_decay=c["weight_decay"])
    steps = [json.loads(line) for line in open(os.path.join(args.run_dir, "batches.jsonl"))]
    losses = []
    for s in steps:
        for group in opt.param_groups:
            group["lr"] = lr_at(c, s["step"], len(steps))
        opt.zero_grad()
        loss = step_loss(model, lora, c["scale"], s["micro_batches"])
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, c["grad_clip"])
        opt.step()
        losses.append(loss)
        print("step %d loss %.6f" % (s["step"], loss), file=sys.stderr)
    result = {"losses": losses, "torch": torch.__version__, "config": c}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    print(json.dumps({"losses": losses}))


def bench(args):
    torch.set_num_threads(args.threads)
    model = Model(args.model)
    gen = torch.Generator().manual_seed(1)
    lora = {}
    for il in range(model.n_layer):
        for t in TARGETS:
            out_dim, in_dim = model.w["blk.%d.%s.weight" % (il, t)].shape
            a = ((torch.rand(args.rank, in_dim, generator=gen) * 2 - 1) / math.sqrt(in_dim)).requires_grad_(True)
            b = torch.zeros(out_dim, args.rank).requires_grad_(True)
            lora[(il, t)] = (a, b)
    params = [t for pair in lora.values() for t in pair]
    opt = torch.optim.AdamW(params, lr=1e-5)
    times = []
    for step in range(args.steps):
        tokens = torch.randint(0, model.n_vocab, (1, args.seq), generator=gen).tolist()
        targets = [[1] * args.seq]
        start = time.perf_counter()
        opt.zero_grad()
        step_loss(model, lora, 20.0, [{"tokens": tokens, "targets": targets}])
        opt.step()
        times.append(time.perf_counter() - start)
        print("step %d: %.2f s" % (step + 1, times[-1]), file=sys.stderr)
    timed = times[1:] if len(times) > 1 else times
    print(json.dumps({"tokens_per_s": args.seq * len(timed) / sum(timed),
                      "step_s": sorted(timed),
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("replay", help="repeat a graft run made with --save-init")
    r.add_argument("run_dir")
    r.add_argument("--out")
    r.add_argument("--threads", type=int, default=1)
    b = sub.add_parser("bench", help="train tokens/s and peak RSS on random tokens")
    b.add_argument("--model", required=True)
    b.add_argument("--seq", type=int, default=256)
    b.add_argument("--steps", type=int, default=3)
    b.add_argument("--rank", type=int, default=16)
    b.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    replay(args) if args.mode == "replay" else bench(args)


if __name__ == "__main__":
    main()
