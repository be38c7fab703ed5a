#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>

#include "fixtures.h"
#include "io/safetensors.h"

namespace graft {
namespace {

using testing::error_of;
using testing::fresh_dir;
using testing::write_text;

// Builds a file by hand, as the format's specification lays it out.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string floats(std::initializer_list<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

TEST(Safetensors, ReadsAFileLaidOutByTheSpecification) {
  const fs::path dir = fresh_dir("st-spec");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},"z":{"dtype":"BF16","shape":[1],"data_offsets":[20,22]}})";
  // F16 1.0 = 0x3c00, -2.0 = 0xc000; BF16 0.5 = 0x3f00.
  const std::string data =
      floats({1.0f, 2.0f, 3.0f, 4.0f}) + std::string("\x00\x3c\x00\xc0", 4) + std::string("\x00\x3f", 2);
  write_text(dir / "a.safetensors", make_file(header, data));

  auto file = SafetensorsFile::open((dir / "a.safetensors").string());
  ASSERT_TRUE(file.ok()) << error_of(file);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ASSERT_EQ(file->tensors().size(), 3u);
  const SafetensorsTensor* w = file->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(*file->read_floats(*w), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(*file->read_floats(*file->find("h")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(*file->read_floats(*file->find("z")), (std::vector<float>{0.5f}));
  EXPECT_EQ(file->find("nope"), nullptr);
}

TEST(Safetensors, WriterRoundTripsEveryFloatDtype) {
  const fs::path dir = fresh_dir("st-roundtrip");
  std::vector<float> values{0.5f, -1.25f, 3.0f, 0.0f, 1024.0f, -0.125f};
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.add("f32", {2, 3}, values, SafetensorsDtype::f32).ok());
  ASSERT_TRUE(writer.add("f16", {3, 2}, values, SafetensorsDtype::f16).ok());
  ASSERT_TRUE(writer.add("bf16", {6}, values, SafetensorsDtype::bf16).ok());
  writer.set_metadata("note", "hello");
  const std::string path = (dir / "out.safetensors").string();
  ASSERT_TRUE(writer.write(path).ok());

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << error_of(file);
  EXPECT_EQ(file->metadata().at("note"), "hello");
  for (const char* name : {"f32", "f16", "bf16"}) {
    const SafetensorsTensor* t = file->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(*file->read_floats(*t), values) << name;  // all values are exact in every dtype
  }
  EXPECT_EQ(file->find("f16")->dtype, "F16");
  EXPECT_EQ(file->find("f16")->shape, (std::vector<int64_t>{3, 2}));
  // The data section starts 8-byte aligned.
  auto bytes = read_file(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t((*bytes)[size_t(i)]);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(Safetensors, WriterRejectsBadTensors) {
  SafetensorsWriter writer;
  std::vector<float> three{1, 2, 3};
  EXPECT_NE(error_of(writer.add("x", {2, 2}, three)).find("3 values"), std::string::npos);
  ASSERT_TRUE(writer.add("x", {3}, three).ok());
  EXPECT_NE(error_of(writer.add("x", {3}, three)).find("twice"), std::string::npos);
  EXPECT_FALSE(writer.add("__metadata__", {3}, three).ok());
}

struct BadCase {
  const char* name;
  std::string bytes;
  const char* expect;
};

TEST(Safetensors, BadFilesGiveClearErrors) {
  const fs::path dir = fresh_dir("st-bad");
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string good = make_file(good_header, floats({1, 2}));
  std::vector<BadCase> cases = {
      {"tiny", "abc", "only 3 bytes"},
      {"huge-header",
       make_file(good_header, floats({1, 2})).replace(0, 8, std::string("\xff\xff\xff\x7f\0\0\0\0", 8)),
       "truncated"},
      {"not-json", make_file("{not json", ""), "not a JSON object"},
      {"array", make_file("[1,2]", ""), "not a JSON object"},
      {"truncated-data", good.substr(0, good.size() - 3), "truncated"},
      {"size-mismatch",
       make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2})),
       "8 bytes of data for 3 elements"},
      {"unknown-dtype", make_file(R"({"w":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", floats({1, 2})),
       "unknown dtype 'F7'"},
      {"negative-shape",
       make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2})),
       "non-negative"},
      {"reversed-offsets",
       make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", floats({1, 2})),
       "outside the data section"},
      {"missing-offsets", make_file(R"({"w":{"dtype":"F32","shape":[2]}})", floats({1, 2})), "data_offsets"},
      {"bad-metadata", make_file(R"({"__metadata__":{"a":1}})", ""), "metadata 'a' is not a string"},
  };
  for (const BadCase& c : cases) {
    const fs::path path = dir / (std::string(c.name) + ".safetensors");
    write_text(path, c.bytes);
    auto file = SafetensorsFile::open(path.string());
    ASSERT_FALSE(file.ok()) << c.name;
    EXPECT_NE(file.error().message.find(c.expect), std::string::npos)
        << c.name << ": " << file.error().message;
    EXPECT_NE(file.error().message.find(path.string()), std::string::npos) << c.name;
  }
  EXPECT_EQ(SafetensorsFile::open((dir / "absent.safetensors").string()).error().code, "not_found");
}

TEST(Safetensors, NonFloatTensorsAreListedButNotConverted) {
  const fs::path dir = fresh_dir("st-int");
  write_text(dir / "i.safetensors",
             make_file(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\1')));
  auto file = SafetensorsFile::open((dir / "i.safetensors").string());
  ASSERT_TRUE(file.ok()) << error_of(file);
  auto values = file->read_floats(file->tensors()[0]);
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.error().message.find("I64"), std::string::npos);
}

}  // namespace
}  // namespace graft
