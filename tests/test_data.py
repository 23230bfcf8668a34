"""Tests of clusterbench.stages.train.data (the SFT data layer)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from importlib.resources import files
from pathlib import Path

import pytest
import torch

from clusterbench.errors import UsageError
from clusterbench.stages.train.data import IGNORE, SHIPPED_NAME, load_task, load_tokenizer

ASSETS = files("clusterbench.stages.train") / "assets"
PROMPT = "### Instruction:\nSay hi\n\n### Response:\n"


@pytest.fixture(scope="module")
def shipped():
    return load_task()


@pytest.fixture(scope="module")
def packed():
    return load_task(packing=True)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def write_jsonl(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def test_assets_ship_inside_package():
    for name in ("sft.jsonl", "tokenizer.json"):
        res = ASSETS / name
        assert res.is_file()
        assert len(res.read_bytes()) < 2 * 1024 * 1024


def test_assets_match_generator():
    # The shipped sft.jsonl must be exactly what tools/make_sft_assets.py produces.
    script = Path(__file__).resolve().parents[1] / "tools" / "make_sft_assets.py"
    spec = importlib.util.spec_from_file_location("make_sft_assets", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.make_examples(8000, 20240601)
    data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in rows).encode()
    assert data == (ASSETS / "sft.jsonl").read_bytes()


def test_shipped_task_loads():
    task = load_task()
    assert task.name == SHIPPED_NAME
    assert task.vocab_size == 4096
    assert task.num_samples == 8000 and task.dropped == 0
    assert task.seq_len == 256 and not task.packing
    assert (task.pad_id, task.bos_id, task.eos_id) == (0, 1, 2)


def test_shapes_and_dtypes(shipped):
    b = shipped.batch(0, 16)
    for t in (b.input_ids, b.labels, b.attention_mask):
        assert t.shape == (16, 256) and t.dtype == torch.int64
    assert isinstance(b.real_tokens, int) and isinstance(b.loss_tokens, int)
    assert b.real_tokens == int(b.attention_mask.sum())
    assert b.loss_tokens == int((b.labels[:, 1:] != IGNORE).sum())
    assert int(b.input_ids.max()) < shipped.vocab_size


def test_labels_masked_on_prompt_and_padding(shipped, tok):
    b = shipped.batch(3, 16)
    pad = b.attention_mask == 0
    assert (b.labels[pad] == IGNORE).all()
    assert (b.input_ids[pad] == shipped.pad_id).all()
    for ids, labels, mask in zip(b.input_ids, b.labels, b.attention_mask):
        n = int(mask.sum())
        assert (mask[:n] == 1).all()  # right padding
        trained = (labels != IGNORE).nonzero().flatten()
        first, last = int(trained[0]), int(trained[-1])
        assert (labels[trained] == ids[trained]).all()  # labels are not shifted
        assert last == n - 1 and int(ids[last]) == shipped.eos_id
        assert (labels[first:last + 1] != IGNORE).all()
        prompt = tok.decode(ids[:first].tolist(), skip_special_tokens=False)
        assert prompt.startswith("<s>### Instruction:\n") and prompt.endswith("### Response:\n")


def test_token_counts_by_hand(tmp_path, tok):
    path = write_jsonl(tmp_path / "hi.jsonl", [
        {"instruction": "Say hi", "output": "hi"},
        {"instruction": "Say hi", "input": "", "output": "hi there"},
    ])
    task = load_task(path, seq_len=64)
    p = len(tok.encode(PROMPT, add_special_tokens=False).ids)
    r1 = len(tok.encode("hi", add_special_tokens=False).ids)
    r2 = len(tok.encode("hi there", add_special_tokens=False).ids)
    b = task.batch(0, 2)
    # <s> + prompt + response + </s>; loss on response + </s>
    assert b.real_tokens == (1 + p + r1 + 1) + (1 + p + r2 + 1)
    assert b.loss_tokens == (r1 + 1) + (r2 + 1)
    hi = [1] + tok.encode(PROMPT, add_special_tokens=False).ids \
        + tok.encode("hi", add_special_tokens=False).ids + [2]
    rows = [row[: int(m.sum())].tolist() for row, m in zip(b.input_ids, b.attention_mask)]
    assert hi in rows


def test_determinism_and_seed(shipped):
    again = load_task()
    for step in (0, 7, 499, 500, 1234):  # 500 x 16 = 8000: steps 500+ are epoch 2
        a, b = shipped.batch(step, 16), again.batch(step, 16)
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)
    other = load_task(seed=1)
    assert not torch.equal(shipped.batch(0, 16).input_ids, other.batch(0, 16).input_ids)


def test_epochs_wrap_with_new_permutation(tmp_path):
    path = write_jsonl(tmp_path / "five.jsonl",
                       [{"instruction": f"Say {i}", "output": str(i)} for i in range(5)])
    task = load_task(path, seq_len=32)
    seen = task.row_indices(0, 10)
    assert sorted(seen[:5].tolist()) == list(range(5)) == sorted(seen[5:].tolist())
    assert seen[:5].tolist() != seen[5:].tolist()  # each epoch has its own order
    # Step 2 of global batch 4 = stream positions 8..11, across the epoch 1 -> 2 boundary.
    b = task.batch(2, 4)
    singles = torch.cat([task.batch(k, 1).input_ids for k in range(8, 12)])
    assert torch.equal(b.input_ids, singles)


@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.parametrize("global_batch", [16, 6])
def test_rank_shares_union_is_global_batch(shipped, packed, packing, global_batch):
    task = packed if packing else shipped
    for step in (0, 5, 800):
        full = task.batch(step, global_batch)
        for world in (2, 4):
            parts = [task.batch(step, global_batch, rank, world) for rank in range(world)]
            for field in ("input_ids", "labels", "attention_mask"):
                assert torch.equal(torch.cat([getattr(p, field) for p in parts]),
                                   getattr(full, field))
            assert sum(p.real_tokens for p in parts) == full.real_tokens
            assert sum(p.loss_tokens for p in parts) == full.loss_tokens


def test_bad_batch_arguments(shipped):
    with pytest.raises(UsageError, match="smaller than"):
        shipped.batch(0, 2, 0, 4)
    with pytest.raises(ValueError):
        shipped.batch(0, 16, 4, 4)
    with pytest.raises(ValueError):
        shipped.batch(-1, 16)


def test_packing_has_no_padding(shipped, packed):
    assert packed.packing and packed.name == SHIPPED_NAME
    b = packed.batch(0, 16)
    assert (b.attention_mask == 1).all() and b.real_tokens == 16 * 256
    assert b.loss_tokens > 0
    # Every token of every (untruncated) example ends up in a row, minus the dropped tail.
    total = shipped.batch(0, shipped.num_samples).real_tokens
    assert packed.num_samples == total // 256
    everything = packed.batch(0, packed.num_samples)
    # Each example appears once; the dropped tail (< 256 tokens) can hold only a few.
    assert 8000 - 10 <= int((everything.input_ids == packed.eos_id).sum()) <= 8000
    assert int((everything.input_ids == packed.bos_id).sum()) <= 8000


def test_truncation_and_too_short(tmp_path):
    long_answer = write_jsonl(tmp_path / "long.jsonl",
                              [{"instruction": "Count", "output": " ".join(map(str, range(200)))}])
    b = load_task(long_answer, seq_len=16).batch(0, 1)
    assert b.real_tokens == 16 and b.loss_tokens > 0
    long_prompt = write_jsonl(tmp_path / "prompt.jsonl",
                              [{"instruction": "word " * 100, "output": "ok"}])
    with pytest.raises(UsageError, match="no response fits"):
        load_task(long_prompt, seq_len=16)
    with pytest.raises(UsageError, match="too short"):
        load_task(seq_len=8)


def test_alpaca_with_input_and_user_file_name(tmp_path, tok):
    path = write_jsonl(tmp_path / "mine.jsonl",
                       [{"instruction": "Sort", "input": "b a", "output": "a b"}])
    task = load_task(path, seq_len=64)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    assert task.name == f"file:mine.jsonl:{digest}"
    b = task.batch(0, 1)
    text = tok.decode(b.input_ids[0, : b.real_tokens].tolist(), skip_special_tokens=False)
    assert text == "<s>### Instruction:\nSort\n\n### Input:\nb a\n\n### Response:\na b</s>"


def test_chat_form(tmp_path, tok):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Goodbye."},
    ]}])
    b = load_task(path, seq_len=128).batch(0, 1)
    ids, labels = b.input_ids[0], b.labels[0]
    text = tok.decode(ids[: b.real_tokens].tolist(), skip_special_tokens=False)
    assert text == ("<s>### System:\nBe brief.\n\n### Instruction:\nHi\n\n### Response:\nHello.</s>"
                    "### Instruction:\nBye\n\n### Response:\nGoodbye.</s>")
    trained = tok.decode([int(i) for i in labels if i != IGNORE], skip_special_tokens=False)
    assert trained == "Hello.</s>Goodbye.</s>"


@pytest.mark.parametrize("line, fragment", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got array"),
    ('"text"', "expected a JSON object, got string"),
    ('{"prompt": "x", "completion": "y"}', "missing keys"),
    ('{"instruction": "x"}', 'missing key "output"'),
    ('{"output": "x"}', 'missing key "instruction"'),
    ('{"instruction": 1, "output": "x"}', '"instruction" must be a string'),
    ('{"instruction": "x", "input": 3, "output": "y"}', '"input" must be a string'),
    ('{"messages": []}', "non-empty array"),
    ('{"messages": [{"role": "bot", "content": "x"}]}', "messages[0]"),
    ('{"messages": [{"role": "user"}]}', "messages[0]"),
    ('{"messages": [{"role": "user", "content": "hi"}]}', "no assistant message"),
])
def test_malformed_lines_name_file_and_line(tmp_path, line, fragment):
    good = {"instruction": "a", "output": "b"}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, "", line, good])  # line 2 is blank
    with pytest.raises(UsageError) as err:
        load_task(path, seq_len=32)
    msg = str(err.value)
    assert msg.startswith(f"{path}:3: ") and fragment in msg and "\n" not in msg


def test_not_utf8_and_empty(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"instruction": "a", "output": "b"}\n'
                    b'{"instruction": "caf\xe9", "output": "b"}\n')
    with pytest.raises(UsageError, match=rf"{bad}:2: not UTF-8"):
        load_task(str(bad))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(UsageError, match="empty"):
        load_task(str(empty))


def test_missing_data_file(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match="nope.jsonl: no such file"):
        load_task(missing)


@pytest.mark.parametrize("text", [
    "### Instruction:\nWhat is 12 × 7?\n\n### Response:\n12 × 7 = 84.",
    "  leading spaces, \ttabs\r\nand trailing  ",
    "Reykjavík, Bogotá, 東京, emoji 🚀, Ωmega",
    "",
])
def test_tokenizer_round_trip(tok, text):
    assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text


def test_tokenizer_specials(tok):
    assert tok.get_vocab_size() == 4096
    assert [tok.token_to_id(s) for s in ("<pad>", "<s>", "</s>")] == [0, 1, 2]


def test_tokenizer_path_forms(tmp_path):
    shutil.copyfile(str(ASSETS / "tokenizer.json"), tmp_path / "tokenizer.json")
    assert load_tokenizer(str(tmp_path)).get_vocab_size() == 4096
    assert load_tokenizer(str(tmp_path / "tokenizer.json")).get_vocab_size() == 4096
    task = load_task(tokenizer=str(tmp_path), seq_len=64)
    assert task.vocab_size == 4096
    with pytest.raises(UsageError, match="no such file"):
        load_tokenizer(str(tmp_path / "missing"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UsageError, match="not a tokenizers-format"):
        load_tokenizer(str(tmp_path / "bad.json"))
