"""The memory formula of slurmctl/memory.py, checked against hand-computed numbers."""

import pytest

from slurmctl.config.models import ModelSpec
from slurmctl.submit.memory import estimate_memory, parse_params


@pytest.mark.parametrize("text,count", [("7b", 7e9), ("350M", 350e6), ("1.3B", 1.3e9), (7e9, 7e9), ("125k", 125e3)])
def test_parse_params(text, count):
    assert parse_params(text) == count


def test_parse_params_rejects_words():
    with pytest.raises(ValueError):
        parse_params("seven billion")


def test_mixed_precision_adamw_ddp_is_16_bytes_per_param():
    est = estimate_memory(ModelSpec(params="1b"), "h100", data_parallel=8)
    assert (est.weights_gb, est.gradients_gb, est.optimizer_gb) == (2.0, 2.0, 12.0)
    assert est.usable_gb == pytest.approx(71.0) and est.verdict == "states-fit" and est.max_micro_batch is None


@pytest.mark.parametrize("sharding,states_gb", [("ddp", 112.0), ("zero1", 28 + 84 / 8), ("zero2", 14 + 98 / 8),
                                                ("zero3", 14.0), ("fsdp", 14.0)])
def test_sharding_divides_the_right_states(sharding, states_gb):
    est = estimate_memory(ModelSpec(params="7b", sharding=sharding), "h100", data_parallel=8)
    assert est.states_gb == pytest.approx(states_gb)


def test_fp32_sgd_and_activations():
    model = ModelSpec(params="1b", precision="fp32", optimizer="sgd", micro_batch=2, seq_len=1024, hidden_size=2048,
                      num_layers=24)
    est = estimate_memory(model, "l4", data_parallel=1)
    assert est.states_gb == pytest.approx(8.0)  # 4 B weights + 4 B grads, no optimizer state
    per_sample = 34 * 1024 * 2048 * 24 * 2 / 1e9  # fp32 doubles the 16-bit activation bytes
    assert est.activation_gb_per_sample == pytest.approx(per_sample)
    assert est.max_micro_batch == int((24 * 0.9 - 1 - 8) / per_sample)
    assert est.verdict == "fits"


def test_activation_checkpointing_shrinks_activations():
    base = dict(params="7b", sharding="fsdp", micro_batch=8, seq_len=4096, hidden_size=4096, num_layers=32)
    plain = estimate_memory(ModelSpec(**base), "h100", data_parallel=8)
    ckpt = estimate_memory(ModelSpec(**base, activation_checkpointing=True), "h100", data_parallel=8)
    assert plain.verdict == "does-not-fit" and ckpt.verdict == "fits"
    assert ckpt.activation_gb_per_sample == pytest.approx((2 * 4096 * 4096 * 32 + 34 * 4096 * 4096) / 1e9)


def test_unknown_gpu_and_site_override():
    assert estimate_memory(ModelSpec(params="1b"), "mystery", 1) is None
    assert estimate_memory(ModelSpec(params="1b"), "mystery", 1, {"mystery": 40}).usable_gb == pytest.approx(35.0)


def test_logits_count_when_vocab_is_given():
    # Measured on an H200 (benchmarks/results/gpu_memory_h200.txt): a 125M model at seq 2048 with a
    # 32k vocabulary holds 0.77 GB of logits per sequence, more than its 0.64 GB of activations.
    base = dict(params="125m", micro_batch=8, seq_len=2048, hidden_size=768, num_layers=12)
    without = estimate_memory(ModelSpec(**base), "h200", 1)
    with_vocab = estimate_memory(ModelSpec(**base, vocab_size=32000), "h200", 1)
    logits_gb = with_vocab.activation_gb_per_sample - without.activation_gb_per_sample
    assert logits_gb == pytest.approx(12 * 2048 * 32000 / 1e9)
    assert 0.74 <= logits_gb <= 0.82
    assert with_vocab.max_micro_batch < without.max_micro_batch
