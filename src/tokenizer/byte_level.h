// GPT-2 byte-level BPE writes every byte as a printable character: printable
// Latin-1 bytes as themselves, the others as U+0100 + n. byte_to_codepoint
// gives that character; codepoint_to_byte inverts it (-1 for any other
// character).
#pragma once

#include <cstdint>

namespace graft::utf8 {

uint32_t byte_to_codepoint(uint8_t byte);
int codepoint_to_byte(uint32_t cp);

}  // namespace graft::utf8
