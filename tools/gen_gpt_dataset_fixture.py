#!/usr/bin/env python3
"""Writes tests/fixtures/data/gpt_dataset.json: Megatron-LM's GPTDataset / BlendedDataset
indices for small synthetic corpora, computed by an independent pure-Python + numpy
re-statement of Megatron's algorithm (megatron/core/datasets/gpt_dataset.py,
blended_dataset.py, blended_megatron_dataset_builder.py, blended_megatron_dataset_config.py,
utils.py and helpers.cpp build_sample_idx / build_blending_indices). tests/data/
test_gpt_dataset.cpp and test_blended_dataset.cpp check that the C++ classes give exactly
these arrays and samples.

Needs numpy (Debian: apt-get install python3-numpy; run with /usr/bin/python3). Only this
generator needs it; the C++ build and tests read the committed JSON.

    /usr/bin/python3 tools/gen_gpt_dataset_fixture.py > tests/fixtures/data/gpt_dataset.json

Token values in the synthetic corpora: token = 100000 * corpus_number + (position of the token
in the corpus' concatenated sequences), so every expected sample is plain arithmetic.
"""
import json
import math
import re
import sys

import numpy

SURPLUS = 0.005       # BlendedMegatronDatasetConfig.mid_level_dataset_surplus default
THRESHOLD = 0.80      # GPTDataset separate_final_epoch threshold
SPLIT_NAMES = ["train", "valid", "test"]


# ---- Megatron's split arithmetic -------------------------------------------------------------
def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def split_matrix(split):
    vec = [float(x) for x in re.findall(r"[.0-9]+", split)]
    vec = vec + [0.0] * (3 - len(vec))
    vec = normalize(vec)
    ends = [0.0]
    for v in vec:
        ends.append(ends[-1] + v)
    out = []
    for i in range(3):
        out.append(None if ends[i + 1] <= ends[i] else (ends[i], ends[i + 1]))
    return out


def split_ranges(split, num_elements):
    out = []
    for bookend in split_matrix(split):
        if bookend is None:
            out.append(None)
        else:
            out.append((int(round(bookend[0] * float(num_elements))),
                        int(round(bookend[1] * float(num_elements)))))
    return out


# ---- GPTDataset ---------------------------------------------------------------------------------
def num_epochs_for(tokens_per_epoch, num_samples, seq_length):
    if num_samples is None:
        return 1
    epochs, tokens = 1, tokens_per_epoch
    while tokens < num_samples * seq_length + 1:
        epochs += 1
        tokens += tokens_per_epoch
    return epochs


def document_index(documents, num_epochs, rng, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        idx = numpy.tile(numpy.asarray(documents, dtype=numpy.int32), num_epochs)
        rng.shuffle(idx)
        return idx
    first = document_index(documents, num_epochs - 1, rng, False)
    last = document_index(documents, 1, rng, False)
    return numpy.concatenate((first, last))


def sample_index(lengths, doc_idx, seq_length, num_epochs, tokens_per_epoch):
    # helpers.cpp build_sample_idx with drop_last_partial_sequence and one extra token
    n = (num_epochs * tokens_per_epoch - 1) // seq_length
    out = [(0, 0)]
    pos, off = 0, 0
    while len(out) <= n:
        remaining = seq_length + 1
        while remaining != 0:
            doc_len = lengths[doc_idx[pos]] - off
            remaining -= doc_len
            if remaining <= 0:
                off += remaining + doc_len - 1
                remaining = 0
            else:
                assert pos != len(doc_idx) - 1, "ran out of documents"
                pos += 1
                off = 0
        out.append((pos, off))
    return out


def shuffle_index(num_samples, total_size, rng):
    first = numpy.arange(0, num_samples, dtype=numpy.int64)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, dtype=numpy.int64)
    rng.shuffle(last)
    return numpy.concatenate((first, last))


class GPT:
    def __init__(self, lengths, starts, corpus, rng_range, num_samples, seq_length, seed):
        beg, end = rng_range
        self.lengths, self.starts, self.corpus = lengths, starts, corpus
        self.seq_length = seq_length
        self.tokens_per_epoch = sum(lengths[beg:end])
        self.num_epochs = num_epochs_for(self.tokens_per_epoch, num_samples, seq_length)
        self.separate = False
        sans = None
        if self.num_epochs > 1:
            sans = ((self.num_epochs - 1) * self.tokens_per_epoch - 1) // seq_length
            from_final = num_samples - sans
            per_epoch = (self.tokens_per_epoch - 1) // seq_length
            assert 0 <= from_final <= per_epoch + 1
            self.separate = from_final < int(THRESHOLD * per_epoch)
        rng = numpy.random.RandomState(seed)
        self.doc = document_index(list(range(beg, end)), self.num_epochs, rng, self.separate)
        self.sample = sample_index(lengths, self.doc, seq_length, self.num_epochs,
                                   self.tokens_per_epoch)
        total = len(self.sample) - 1
        self.shuffle = shuffle_index(sans if self.separate else total, total, rng)

    def __len__(self):
        return len(self.sample) - 1

    def get(self, i):
        j = int(self.shuffle[i])
        (b, bo), (e, eo) = self.sample[j], self.sample[j + 1]
        toks = []
        for k in range(b, e + 1):
            seq = int(self.doc[k])
            lo = bo if k == b else 0
            hi = eo + 1 if k == e else self.lengths[seq]
            toks.extend(100000 * self.corpus + self.starts[seq] + t for t in range(lo, hi))
        assert len(toks) == self.seq_length + 1
        return toks

    def record(self, num_shown):
        return {
            "tokens_per_epoch": self.tokens_per_epoch,
            "num_epochs": self.num_epochs,
            "separate_final_epoch": self.separate,
            "num_samples_total": len(self),
            "document_index": [int(x) for x in self.doc],
            "sample_index": [int(v) for pair in self.sample for v in pair],
            "shuffle_index": [int(x) for x in self.shuffle],
            "samples": [self.get(i) for i in range(min(num_shown, len(self)))],
        }


def starts_of(lengths):
    out, s = [], 0
    for l in lengths:
        out.append(s)
        s += l
    return out


# ---- BlendedDataset -----------------------------------------------------------------------------
def blending_indices(weights, size):
    # helpers.cpp build_blending_indices
    counts = [0] * len(weights)
    di, dsi = [], []
    for i in range(size):
        x = max(float(i), 1.0)
        best, best_err = 0, weights[0] * x - counts[0]
        for d in range(1, len(weights)):
            err = weights[d] * x - counts[d]
            if err > best_err:
                best, best_err = d, err
        di.append(best)
        dsi.append(counts[best])
        counts[best] += 1
    return di, dsi


def sizes_per_dataset(weights, target, surplus):
    return [int(math.ceil(math.ceil(target * w) * (1 + surplus))) for w in weights]


def main():
    out = {"generator": "tools/gen_gpt_dataset_fixture.py", "numpy": numpy.__version__}

    # -- GPTDataset cases over one corpus ------------------------------------------------------
    rs = numpy.random.RandomState(11)
    lengths = [int(x) for x in rs.randint(1, 50, size=60)]
    for k in (5, 17, 33):
        lengths[k] = 1
    corpora = {"tiny": [3, 5, 2, 4], "main": lengths}
    cases = []

    def add_case(corpus, split, split_id, seq_length, num_samples, seed, shown=6):
        lens = corpora[corpus]
        rng_range = split_ranges(split, len(lens))[split_id]
        g = GPT(lens, starts_of(lens), 0, rng_range, num_samples, seq_length, seed)
        rec = {"corpus": corpus, "split": split, "split_id": split_id,
               "sequence_range": list(rng_range), "seq_length": seq_length,
               "num_samples": num_samples, "seed": seed}
        rec.update(g.record(shown))
        cases.append(rec)

    add_case("tiny", "1", 0, 4, None, 1234)
    add_case("tiny", "1", 0, 4, 5, 1234)
    add_case("tiny", "1", 0, 3, 40, 3)
    add_case("main", "80,15,5", 0, 16, None, 1234)
    # Megatron's threshold: pick sample counts landing on both sides of it.
    t = sum(lengths[0:split_ranges("80,15,5", 60)[0][1]])
    per_epoch = (t - 1) // 16
    sans2 = (2 * t - 1) // 16
    add_case("main", "80,15,5", 0, 16, sans2 + 1, 1234)                       # separate
    add_case("main", "80,15,5", 0, 16, sans2 + int(0.8 * per_epoch), 1234)    # not separate
    add_case("main", "80,15,5", 0, 16, sans2 + int(0.8 * per_epoch) - 1, 1234)  # separate
    add_case("main", "80,15,5", 0, 16, 3 * per_epoch, 7)
    add_case("main", "80,15,5", 1, 7, 100, 1234)
    add_case("main", "80,15,5", 2, 32, 20, 1234)
    add_case("main", "80,15,5", 0, 1, 50, 99)
    add_case("main", "80,15,5", 0, 64, 2, 2 ** 32 - 1)
    out["corpora"] = corpora
    out["gpt_cases"] = cases

    # -- blending index alone ------------------------------------------------------------------
    blends = []
    for raw, size in (([0.5, 0.3, 0.2], 50), ([1.0, 1.0, 1.0], 30), ([7.0, 2.0, 1.0], 40),
                      ([0.25, 0.75], 17), ([3.0], 5)):
        w = normalize(raw)
        di, dsi = blending_indices(w, size)
        blends.append({"weights": raw, "normalized": [x.hex() for x in w], "size": size,
                       "dataset_index": di, "dataset_sample_index": dsi})
    out["blending_cases"] = blends

    # -- BlendedMegatronDatasetBuilder over three corpora -------------------------------------
    rs = numpy.random.RandomState(5)
    blend_corpora = [[int(x) for x in rs.randint(2, 40, size=n)] for n in (40, 27, 70)]
    raw_weights = [3.0, 5.0, 2.0]
    split, seq_length, seed = "90,8,2", 8, 1234
    sizes = [200, 30, 10]
    weights = normalize(raw_weights)
    target = [sizes_per_dataset(weights, sizes[i], 0.0) for i in range(3)]
    buffer = [sizes_per_dataset(weights, sizes[i], SURPLUS) for i in range(3)]
    builder = {"corpora": blend_corpora, "weights": raw_weights, "split": split,
               "seq_length": seq_length, "seed": seed, "num_samples": sizes, "splits": []}
    for i in range(3):
        mids = []
        for d, lens in enumerate(blend_corpora):
            rng_range = split_ranges(split, len(lens))[i]
            mids.append(GPT(lens, starts_of(lens), d, rng_range, buffer[i][d], seq_length, seed))
        size_i = sum(target[i])
        w_i = normalize(weights)  # BlendedDataset normalises the (normalised) weights again
        di, dsi = blending_indices(w_i, size_i)
        for d in range(3):
            assert di.count(d) <= len(mids[d])
        builder["splits"].append({
            "name": SPLIT_NAMES[i],
            "sequence_ranges": [list(split_ranges(split, len(l))[i]) for l in blend_corpora],
            "per_dataset_num_samples": buffer[i],
            "per_dataset_total": [len(m) for m in mids],
            "size": size_i,
            "dataset_index": di,
            "dataset_sample_index": dsi,
            "samples": [mids[di[k]].get(dsi[k]) for k in range(min(size_i, 12))],
        })
    out["builder"] = builder

    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
