"""benchmarks/rehearsal.py: its real-format tokenizer at the real vocabulary, and the whole rehearsal at tiny widths."""
import json

import pytest

from benchmarks import rehearsal


def test_the_tokenizer_has_qwen2s_special_ids_and_chat_template(tmp_path):
    data = rehearsal.write_data(tmp_path / "gsm8k.jsonl", n=8)
    tokenizer = rehearsal.build_tokenizer(tmp_path / "bpe", data.read_text().splitlines() * 4)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in
           ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|file_sep|>", "|<MASK>|")}
    assert ids == {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|file_sep|>": 151664,
                   "|<MASK>|": 151665}
    assert len(tokenizer) == 151666 and tokenizer.eos_token_id == 151645 and tokenizer.pad_token_id == 151643
    text = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    encoded = tokenizer.encode(text, add_special_tokens=False)
    assert encoded.count(151644) == 3 and encoded.count(151645) == 2  # specials are single tokens
    assert tokenizer.decode(encoded) == text


@pytest.mark.slow
def test_the_rehearsal_runs_every_phase_at_tiny_widths_and_compares_with_the_plan(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["rehearsal", "--tiny", "--widths", "1.5b", "--depths", "1",
                                     "--methods", "block_grpo,es", "--out", str(tmp_path)])
    rehearsal.main()
    rows = json.loads((tmp_path / "rehearsal.json").read_text())
    assert [r["method"] for r in rows] == ["block_grpo", "es"]
    grpo, es = (r["measured"] for r in rows)
    assert grpo["exit"] == 0 and es["exit"] == 0
    assert set(grpo["seconds"]) == set(rehearsal.PHASES)  # every phase ran and was timed
    assert set(es["seconds"]) == {"rollout", "optimizer", "evaluation"}  # ES: no likelihood, no backward
    assert grpo["calls"]["evaluation"] == 3  # start, hard subset, end
    fields = json.loads((tmp_path / "ckpt-1.5b-1/config.json").read_text())
    assert (fields["bd_size"], fields["small_block_size"], fields["model_type"]) == (32, 8, "Fast_dLLM_Qwen")
    assert "plan vs measured peak" in capsys.readouterr().out
