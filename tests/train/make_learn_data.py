#!/usr/bin/env python3
"""Writes the synthetic datasets of the trainer's "it learns" tests
(tests/train/learn_test.cpp) into tests/data/train/learn/. The files are
committed; rerun this only to change them (same seed, same files).

  memorize/train.jsonl   32 prompt -> answer pairs to learn by heart (valid.jsonl: the same pairs)
  format/train.jsonl     prompts of 3-5 words -> the constant reply " OK: noted."
  format/valid.jsonl     held-out prompts of the same form
"""
import json
import os
import random

WORDS = ("red blue green black white small large happy quick slow north south east west river mountain "
         "apple orange bread water paper stone music light night morning summer winter garden window table "
         "chair road city house horse bird fish tree flower cloud rain snow fire gold silver king queen ship "
         "door wall book letter song dance").split()

# The reply format the "format" set teaches: one constant reply (the issue's
# alternative to copying a word, which a rank-8 adapter on a random 2-layer
# model does not learn in a test's time).
REPLY = " OK: noted."

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "train", "learn")


def write(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main():
    rng = random.Random(2024)
    pairs, seen = [], set()
    while len(pairs) < 32:
        a, b = rng.sample(WORDS, 2)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        answer = " ".join(rng.sample(WORDS, 2))
        pairs.append({"prompt": "Code %s %s:" % (a, b), "completion": " " + answer})
    write(os.path.join(OUT, "memorize", "train.jsonl"), pairs)
    write(os.path.join(OUT, "memorize", "valid.jsonl"), pairs)

    def format_rows(n, taken):
        rows = []
        while len(rows) < n:
            words = rng.sample(WORDS, rng.randint(3, 5))
            prompt = " ".join(words).capitalize()
            if prompt in taken:
                continue
            taken.add(prompt)
            rows.append({"prompt": prompt, "completion": REPLY})
        return rows

    taken = set()
    write(os.path.join(OUT, "format", "train.jsonl"), format_rows(160, taken))
    write(os.path.join(OUT, "format", "valid.jsonl"), format_rows(20, taken))


if __name__ == "__main__":
    main()
