// The job store: SQLite in WAL mode, one transaction per change, pages,
// events in order, files in use refused, state that survives a reopen.
#include "train/job_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "train/job_files.h"

namespace graft {
namespace {

JobRecord make_job(const std::string& id, const std::string& training_file = "file-a") {
  JobRecord job;
  job.id = id;
  job.created_at = unix_now();
  job.spec.model = "tiny";
  job.spec.training_file = training_file;
  job.adapter_id = "adapter-" + id;
  job.work_dir = "/tmp/nowhere/" + id;
  return job;
}

FileRecord make_file(const std::string& id) {
  FileRecord f;
  f.id = id;
  f.filename = id + ".jsonl";
  f.purpose = "fine-tune";
  f.bytes = 10;
  f.sha256 = "00";
  f.rows = 1;
  f.path = "/tmp/nowhere/" + id;
  f.created_at = unix_now();
  return f;
}

TEST(JobStore, OpensInWalModeAndKeepsEverythingAcrossAReopen) {
  TempDir dir("graft-jobstore");
  const fs::path db = dir.path() / "jobs.sqlite";
  {
    auto store = JobStore::open(db);
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE((*store)->add_file(make_file("file-a")));
    JobChanges changes;
    changes.events.push_back({0, "", 0, "info", "message", "created", nullptr});
    JobRecord job = make_job("ftjob-1");
    job.spec.lora = {{"rank", 4}};
    job.spec.seed = 42;
    ASSERT_TRUE((*store)->create_job(job, changes));
    auto updated = (*store)->update_job("ftjob-1", [](JobRecord& j, JobChanges& c) -> Status {
      j.status = JobStatus::running;
      j.last_step = 7;
      j.train_loss = 1.25;
      j.error = JobError{"x", "went wrong", "training_file"};
      c.checkpoints.push_back({0, "", 6, "/ckpt/6", 0, {{"step", 6}}});
      return {};
    });
    ASSERT_TRUE(updated) << updated.error().message;
  }
  auto store = JobStore::open(db);
  ASSERT_TRUE(store) << store.error().message;
  auto job = (*store)->job("ftjob-1");
  ASSERT_TRUE(job);
  EXPECT_EQ(job->status, JobStatus::running);
  EXPECT_EQ(job->last_step, 7);
  EXPECT_EQ(job->train_loss, 1.25);
  EXPECT_EQ(job->spec.lora, json({{"rank", 4}}));
  EXPECT_EQ(job->spec.seed, 42);
  ASSERT_TRUE(job->error);
  EXPECT_EQ(job->error->message, "went wrong");
  EXPECT_EQ(job->error->param, "training_file");
  auto checkpoints = (*store)->list_checkpoints("ftjob-1", std::nullopt, 10);
  ASSERT_TRUE(checkpoints);
  ASSERT_EQ(checkpoints->items.size(), 1u);
  EXPECT_EQ(checkpoints->items[0].path, "/ckpt/6");
  ASSERT_TRUE((*store)->file("file-a"));

  auto raw = Database::open(db);
  ASSERT_TRUE(raw);
  EXPECT_EQ((*raw)->journal_mode(), "wal");
}

TEST(JobStore, AFailedChangeLeavesTheJobAsItWas) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  ASSERT_TRUE(store->create_job(make_job("ftjob-1"), {}));
  auto refused = store->update_job("ftjob-1", [](JobRecord& j, JobChanges& c) -> Status {
    j.status = JobStatus::failed;
    c.events.push_back({0, "", 0, "info", "message", "should not stay", nullptr});
    return make_error("conflict", "no");
  });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "conflict");
  EXPECT_EQ(store->job("ftjob-1")->status, JobStatus::validating_files);
  EXPECT_TRUE(store->list_events("ftjob-1", std::nullopt, 10)->items.empty());
  EXPECT_EQ(store->job("ftjob-9").error().code, "not_found");
}

TEST(JobStore, JobsPageNewestFirstWithAfterAndHasMore) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(store->create_job(make_job("ftjob-" + std::to_string(i)), {}));
  auto first = store->list_jobs("", 2);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->items.size(), 2u);
  EXPECT_EQ(first->items[0].id, "ftjob-5");
  EXPECT_EQ(first->items[1].id, "ftjob-4");
  EXPECT_TRUE(first->has_more);
  auto second = store->list_jobs("ftjob-4", 2);
  EXPECT_EQ(second->items[0].id, "ftjob-3");
  EXPECT_EQ(second->items[1].id, "ftjob-2");
  EXPECT_TRUE(second->has_more);
  auto last = store->list_jobs("ftjob-2", 2);
  ASSERT_EQ(last->items.size(), 1u);
  EXPECT_EQ(last->items[0].id, "ftjob-1");
  EXPECT_FALSE(last->has_more);
  EXPECT_EQ(store->list_jobs("ftjob-77", 2).error().code, "not_found");
}

TEST(JobStore, EventsHaveIncreasingIdsAndCanBeReadFromAnyPoint) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  ASSERT_TRUE(store->create_job(make_job("ftjob-1"), {}));
  ASSERT_TRUE(store->create_job(make_job("ftjob-2", "file-b"), {}));
  for (int i = 0; i < 10; ++i) {
    // Interleave another job's events: ids are global, each job reads its own.
    for (const char* id : {"ftjob-1", "ftjob-2"}) {
      ASSERT_TRUE(store->update_job(id, [&](JobRecord&, JobChanges& c) -> Status {
        c.events.push_back({0, "", 0, "info", "message", std::to_string(i), nullptr});
        return {};
      }));
    }
  }
  auto all = store->events_since("ftjob-1", 0, 100);
  ASSERT_TRUE(all);
  ASSERT_EQ(all->events.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(all->events[i].message, std::to_string(i));
  for (size_t i = 1; i < all->events.size(); ++i) EXPECT_GT(all->events[i].seq, all->events[i - 1].seq);
  EXPECT_EQ(all->status, JobStatus::validating_files);
  EXPECT_FALSE(all->more);

  auto later = store->events_since("ftjob-1", all->events[4].seq, 3);
  ASSERT_EQ(later->events.size(), 3u);
  EXPECT_EQ(later->events[0].message, "5");
  EXPECT_TRUE(later->more);

  auto newest = store->list_events("ftjob-1", std::nullopt, 4);
  ASSERT_EQ(newest->items.size(), 4u);
  EXPECT_EQ(newest->items[0].message, "9");
  EXPECT_TRUE(newest->has_more);
  auto older = store->list_events("ftjob-1", newest->items.back().seq, 100);
  ASSERT_EQ(older->items.size(), 6u);
  EXPECT_EQ(older->items[0].message, "5");
  EXPECT_EQ(older->items.back().message, "0");
  EXPECT_FALSE(older->has_more);
}

TEST(JobStore, SubscribersHearOfNewEventsOnly) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  ASSERT_TRUE(store->create_job(make_job("ftjob-1"), {}));
  int heard = 0;
  const int64_t token = store->subscribe("ftjob-1", [&] { ++heard; });
  ASSERT_TRUE(store->update_job("ftjob-1", [](JobRecord& j, JobChanges&) -> Status {
    j.last_step = 1;  // no event: nothing to hear
    return {};
  }));
  EXPECT_EQ(heard, 0);
  ASSERT_TRUE(store->update_job("ftjob-1", [](JobRecord&, JobChanges& c) -> Status {
    c.events.push_back({0, "", 0, "info", "message", "x", nullptr});
    return {};
  }));
  EXPECT_EQ(heard, 1);
  store->unsubscribe(token);
  ASSERT_TRUE(store->update_job("ftjob-1", [](JobRecord&, JobChanges& c) -> Status {
    c.events.push_back({0, "", 0, "info", "message", "y", nullptr});
    return {};
  }));
  EXPECT_EQ(heard, 1);
}

TEST(JobStore, AFileInUseByAnActiveJobCannotBeRemoved) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  ASSERT_TRUE(store->add_file(make_file("file-a")));
  ASSERT_TRUE(store->create_job(make_job("ftjob-1", "file-a"), {}));
  auto refused = store->remove_file("file-a");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "conflict");
  EXPECT_NE(refused.error().message.find("ftjob-1"), std::string::npos) << refused.error().message;
  ASSERT_TRUE(store->update_job("ftjob-1", [](JobRecord& j, JobChanges&) -> Status {
    j.status = JobStatus::succeeded;
    return {};
  }));
  ASSERT_TRUE(store->remove_file("file-a"));
  EXPECT_EQ(store->file("file-a").error().code, "not_found");
  EXPECT_EQ(store->remove_file("file-a").error().code, "not_found");
}

TEST(JobStore, TwoActiveJobsCannotMakeTheSameAdapter) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  ASSERT_TRUE(store->create_job(make_job("ftjob-1"), {}));
  JobRecord twin = make_job("ftjob-2");
  twin.adapter_id = "adapter-ftjob-1";
  auto refused = store->create_job(twin, {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "conflict");
}

TEST(JobStore, ConcurrentWritersEachCommitWhole) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  ASSERT_TRUE(store->create_job(make_job("ftjob-1"), {}));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto r = store->update_job("ftjob-1", [](JobRecord& j, JobChanges& c) -> Status {
          j.last_step += 1;
          c.events.push_back({0, "", 0, "info", "message", std::to_string(j.last_step), nullptr});
          return {};
        });
        ASSERT_TRUE(r);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->job("ftjob-1")->last_step, 100);
  auto events = store->events_since("ftjob-1", 0, 1000);
  ASSERT_EQ(events->events.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(events->events[i].message, std::to_string(i + 1));
}

TEST(FileStore, ChecksJsonlAndNamesTheBadLine) {
  EXPECT_EQ(*check_jsonl("{\"text\": \"a\"}\n\n{\"text\": \"b\"}\r\n"), 2);
  EXPECT_EQ(*check_jsonl("{\"text\": \"no final newline\"}"), 1);
  auto broken = check_jsonl("{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \n");
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().code, "invalid_file");
  EXPECT_NE(broken.error().message.find("line 3"), std::string::npos) << broken.error().message;
  auto not_object = check_jsonl("{\"text\": \"a\"}\n[1, 2]\n");
  ASSERT_FALSE(not_object);
  EXPECT_NE(not_object.error().message.find("line 2"), std::string::npos);
  EXPECT_FALSE(check_jsonl("a,b,c\n1,2,3\n"));
  EXPECT_FALSE(check_jsonl(""));
  EXPECT_FALSE(check_jsonl("\n  \n"));
  EXPECT_FALSE(check_jsonl("{\"text\": \"\xff\xfe\"}\n"));  // not UTF-8
}

TEST(FileStore, KeepsTheBytesWithTheirHashAndDeletesThem) {
  TempDir dir("graft-jobstore");
  auto store = JobStore::open(dir.path() / "jobs.sqlite").value();
  FileStore files(*store, dir.path() / "files");
  const std::string content = "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n";
  auto added = files.add("mine.jsonl", "fine-tune", content);
  ASSERT_TRUE(added) << added.error().message;
  EXPECT_EQ(added->rows, 2);
  EXPECT_EQ(added->bytes, static_cast<int64_t>(content.size()));
  EXPECT_EQ(added->sha256, "e671bf3337962744a15a9c3aef9191fb0c91d36f143c54937deb5932f5b26a46");
  EXPECT_EQ(*read_file(added->path), content);
  EXPECT_EQ(added->path.parent_path(), dir.path() / "files");
  EXPECT_EQ(store->file(added->id)->sha256, added->sha256);

  auto refused = files.add("bad.jsonl", "fine-tune", "not json\n");
  ASSERT_FALSE(refused);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path() / "files"), fs::directory_iterator()), 1);

  ASSERT_TRUE(files.remove(added->id));
  EXPECT_FALSE(fs::exists(added->path));
  EXPECT_EQ(store->file(added->id).error().code, "not_found");
}

}  // namespace
}  // namespace graft
