// The Hugging Face cache layout: repo ids, model references, snapshots
// resolved through refs, links to blobs as huggingface_hub makes them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "io/hf_cache.h"
#include "io/hf_download.h"

namespace graft::hf {
namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

// A repo as huggingface_hub leaves it: blobs, a snapshot of links, refs/main.
void cached_repo(const fs::path& hub, const std::string& folder, const std::vector<std::string>& files) {
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string etag = std::string(64, char('a' + i));
    write(hub / folder / "blobs" / etag, "contents of " + files[i]);
    const fs::path link = hub / folder / "snapshots" / kCommit / files[i];
    fs::create_directories(link.parent_path());
    fs::create_symlink(fs::path("../../blobs") / etag, link);
  }
  write(hub / folder / "refs" / "main", kCommit);
}

TEST(HfCache, RepoIdsAndModelReferences) {
  auto id = parse_repo_id("Qwen/Qwen3-0.6B-GGUF");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->folder(), "models--Qwen--Qwen3-0.6B-GGUF");
  EXPECT_EQ(parse_repo_id("gpt2")->folder(), "models--gpt2");
  for (const char* bad : {"", "a/b/c", "../x", "a/..", "org/na me", "a--b/c", "/abs"}) {
    EXPECT_FALSE(parse_repo_id(bad).ok()) << bad;
  }
  auto ref = parse_model_ref("org/name:sub/model-Q4_0.gguf");
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->repo.str(), "org/name");
  EXPECT_EQ(ref->file, "sub/model-Q4_0.gguf");
  EXPECT_FALSE(parse_model_ref("org/name:../../etc/passwd").ok());
  EXPECT_FALSE(parse_model_ref("org/name:/abs.gguf").ok());
  EXPECT_FALSE(parse_model_ref("org/name:").ok());
  EXPECT_TRUE(looks_like_repo("org/name"));
  EXPECT_TRUE(looks_like_repo("org/name:file.gguf"));
  EXPECT_FALSE(looks_like_repo("model.gguf"));
  EXPECT_FALSE(looks_like_repo("/abs/model.gguf"));
  EXPECT_FALSE(looks_like_repo("./org/name"));
  EXPECT_FALSE(looks_like_repo("a/b/c.gguf"));
}

TEST(HfCache, TheHubFolderFollowsHuggingFaceVariables) {
  ::setenv("HF_HUB_CACHE", "/x/hub", 1);
  EXPECT_EQ(default_hub_dir(), fs::path("/x/hub"));
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", "/y", 1);
  EXPECT_EQ(default_hub_dir(), fs::path("/y/hub"));
  ::unsetenv("HF_HOME");
  ::setenv("XDG_CACHE_HOME", "/z", 1);
  EXPECT_EQ(default_hub_dir(), fs::path("/z/huggingface/hub"));
  ::unsetenv("XDG_CACHE_HOME");
}

TEST(HfCache, ResolvesAModelThroughRefsAndLinks) {
  TempDir dir;
  cached_repo(dir.path(), "models--org--one", {"README.md", "model-Q4_0.gguf"});
  cached_repo(dir.path(), "models--org--two", {"a-Q4_0.gguf", "a-Q8_0.gguf", "mmproj-a.gguf"});
  HubCache hub(dir.path());
  auto snapshot = hub.snapshot(*parse_repo_id("org/one"));
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message;
  EXPECT_EQ(snapshot->commit, kCommit);
  EXPECT_EQ(snapshot->files, (std::vector<std::string>{"README.md", "model-Q4_0.gguf"}));
  // The only model GGUF, or the one named.
  auto one = hub.resolve_gguf(*parse_model_ref("org/one"));
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(one->filename(), "model-Q4_0.gguf");
  auto ambiguous = hub.resolve_gguf(*parse_model_ref("org/two"));
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.error().message.find("a-Q4_0.gguf, a-Q8_0.gguf"), std::string::npos)
      << ambiguous.error().message;
  EXPECT_NE(ambiguous.error().message.find("org/two:FILE"), std::string::npos);
  EXPECT_TRUE(hub.resolve_gguf(*parse_model_ref("org/two:a-Q8_0.gguf")).ok());
  auto missing = hub.resolve_gguf(*parse_model_ref("org/two:b.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("graft pull org/two"), std::string::npos);
  auto absent = hub.resolve_gguf(*parse_model_ref("org/three"));
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.error().code, "not_found");
  EXPECT_NE(absent.error().message.find("graft pull org/three"), std::string::npos);
  // Every cached repo.
  auto all = hub.snapshots();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].repo.str(), "org/one");
  // A link whose blob is gone is reported, not served.
  fs::remove(dir.path() / "models--org--one" / "blobs" / std::string(64, 'b'));
  auto broken = hub.resolve_gguf(*parse_model_ref("org/one:model-Q4_0.gguf"));
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("missing blob"), std::string::npos) << broken.error().message;
}

TEST(HfCache, WritesLinksAndRefsAsHuggingFaceHubDoes) {
  TempDir dir;
  HubCache hub(dir.path());
  const RepoId repo = *parse_repo_id("org/name");
  const std::string etag(64, 'e');
  write(hub.blob_path(repo, etag), "weights");
  ASSERT_TRUE(hub.link_snapshot(repo, kCommit, "sub/dir/model.gguf", etag).ok());
  const fs::path link = dir.path() / "models--org--name/snapshots" / kCommit / "sub/dir/model.gguf";
  ASSERT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link),
            fs::path("../../../../blobs") / etag);  // relative, as huggingface_hub writes
  EXPECT_EQ(*read_file(link), "weights");
  // Linking again replaces the link.
  ASSERT_TRUE(hub.link_snapshot(repo, kCommit, "sub/dir/model.gguf", etag).ok());
  ASSERT_TRUE(hub.write_ref(repo, "main", kCommit).ok());
  EXPECT_EQ(*read_file(dir.path() / "models--org--name/refs/main"), kCommit);  // no newline
  ASSERT_TRUE(hub.write_ref(repo, kCommit, kCommit).ok());                     // a commit needs no ref
  EXPECT_FALSE(fs::exists(dir.path() / "models--org--name/refs" / kCommit));
  EXPECT_EQ(hub.incomplete_path(repo, etag).filename(), etag + ".incomplete");
}

TEST(HfCache, GlobsMatchAcrossFoldersAsTheHubsAllowPatterns) {
  EXPECT_TRUE(glob_match("*Q4_0.gguf", "model-Q4_0.gguf"));
  EXPECT_TRUE(glob_match("*Q4_0.gguf", "sub/model-Q4_0.gguf"));
  EXPECT_FALSE(glob_match("*Q4_0.gguf", "model-Q8_0.gguf"));
  EXPECT_TRUE(glob_match("*.json", "config.json"));
  EXPECT_TRUE(glob_match("model-Q?_0.gguf", "model-Q8_0.gguf"));
}

}  // namespace
}  // namespace graft::hf
