// SHA-256 as specified in FIPS 180-4, sections 4.1.2, 4.2.2, 5.1.1, 5.3.3 and 6.2.
#include "core/sha256.hpp"

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shapetune {

namespace {

using HashState = std::array<std::uint32_t, 8>;

// First 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr std::array<std::uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// First 32 bits of the fractional parts of the square roots of the first 8 primes.
constexpr HashState kInitialHash = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

std::uint32_t load_big_endian(const unsigned char* bytes) {
  return std::uint32_t{bytes[0]} << 24 | std::uint32_t{bytes[1]} << 16 | std::uint32_t{bytes[2]} << 8 |
         std::uint32_t{bytes[3]};
}

std::array<std::uint32_t, 64> message_schedule(const unsigned char* block) {
  std::array<std::uint32_t, 64> w{};
  for (int t = 0; t < 16; ++t) w[t] = load_big_endian(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    const std::uint32_t s0 = std::rotr(w[t - 15], 7) ^ std::rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = std::rotr(w[t - 2], 17) ^ std::rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  return w;
}

void compress(HashState& hash, const unsigned char* block) {
  const auto w = message_schedule(block);
  auto [a, b, c, d, e, f, g, h] = hash;
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t sigma1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const std::uint32_t choose = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + sigma1 + choose + kRoundConstants[t] + w[t];
    const std::uint32_t sigma0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = sigma0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  const HashState rounds = {a, b, c, d, e, f, g, h};
  for (int i = 0; i < 8; ++i) hash[i] += rounds[i];
}

// The last partial block followed by the padding: a 1 bit, zeros, and the message length in
// bits as a 64-bit big-endian number. One block when the tail leaves room for 9 bytes, else two.
struct PaddedTail {
  std::array<unsigned char, 128> bytes{};
  std::size_t block_count = 1;
};

PaddedTail padded_tail(std::string_view tail, std::uint64_t message_bytes) {
  PaddedTail padded;
  padded.block_count = tail.size() + 9 <= 64 ? 1 : 2;
  for (std::size_t i = 0; i < tail.size(); ++i) padded.bytes[i] = static_cast<unsigned char>(tail[i]);
  padded.bytes[tail.size()] = 0x80;
  const std::uint64_t message_bits = message_bytes * 8;
  const std::size_t length_field = 64 * padded.block_count - 8;
  for (std::size_t i = 0; i < 8; ++i)
    padded.bytes[length_field + i] = static_cast<unsigned char>(message_bits >> (56 - 8 * i));
  return padded;
}

std::string to_hex(const HashState& hash) {
  constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (std::uint32_t word : hash)
    for (int shift = 28; shift >= 0; shift -= 4) out += kDigits[(word >> shift) & 0xf];
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  HashState hash = kInitialHash;
  const std::size_t whole_blocks_end = bytes.size() / 64 * 64;
  for (std::size_t offset = 0; offset < whole_blocks_end; offset += 64)
    compress(hash, reinterpret_cast<const unsigned char*>(bytes.data()) + offset);
  const PaddedTail tail = padded_tail(bytes.substr(whole_blocks_end), bytes.size());
  for (std::size_t block = 0; block < tail.block_count; ++block) compress(hash, tail.bytes.data() + 64 * block);
  return to_hex(hash);
}

}  // namespace shapetune
