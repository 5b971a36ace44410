"""The stream carried as its spectrum (export.spectrum): each half against the DFT's closed form,
whole networks against the static module (float64) and the trained model (onnxruntime), the
theoretical MACs of what runs, where it applies, and the measured choice (export.policy)."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch

from dnarch_deploy.operators import half_macs, spectrum_form, spectrum_macs
from export import policy, tune
from export.bench import theoretical_costs
from export.emit import to_onnx
from export.lowering import (
    cheapest,
    lower,
    resample_tactics_by_cost,
    spectrum_resample,
    tactic_costs,
)
from export.spectrum import SPECTRUM, FromSpectrum, ToSpectrum, carry_spectrum, why_not
from export.static import (
    Decoder,
    Encoder,
    Resample,
    SpectralConv,
    StaticBlock,
    StaticNet,
    freeze,
    materialize,
)
from export.timing import layers, session

from .export_cases import random_input, random_model

# (length, bins): dense and four-step halves, odd and even lengths, one bin to all of them
HALVES = [(8, 5), (9, 5), (60, 3), (540, 271), (375, 188), (1024, 100), (97, 40), (1, 1)]


@pytest.mark.parametrize(("length", "bins"), HALVES)
def test_to_spectrum_is_the_weighted_dft(length, bins):
    rng = np.random.default_rng(length)
    x = rng.standard_normal((3, 2, length))
    w = rng.uniform(0.5, 2, bins)
    module = ToSpectrum(length, bins, w, out_bins=bins + 4, dtype=torch.float64)
    out = module(torch.from_numpy(x)).numpy()  # (3, 2, re | im, bins + 4)
    spectrum = np.fft.fft(x, axis=-1)[..., :bins] * w
    assert out.shape == (3, 2, 2, bins + 4)
    np.testing.assert_allclose(out[..., 0, :bins], spectrum.real, atol=1e-10 * length)
    np.testing.assert_allclose(out[..., 1, :bins], spectrum.imag, atol=1e-10 * length)
    assert not out[..., bins:].any()  # the padding bins are zero
    assert module.form == spectrum_form(length, bins)[0]
    assert module.macs() == spectrum_macs(length, bins)


@pytest.mark.parametrize(("length", "bins"), HALVES)
def test_from_spectrum_is_the_weighted_inverse(length, bins):
    rng = np.random.default_rng(length + 1)
    spectrum = rng.standard_normal((3, 2, 2, bins + 3))  # more bins than it reads
    c = rng.uniform(0.5, 2, bins)
    module = FromSpectrum(length, c, dtype=torch.float64)
    out = module(torch.from_numpy(spectrum)).numpy()
    k, s = np.arange(bins), np.arange(length)
    phase = np.exp(2j * np.pi * np.outer(k, s) / length)
    x = spectrum[..., 0, :bins] + 1j * spectrum[..., 1, :bins]
    expected = ((x * c) @ phase).real
    np.testing.assert_allclose(out, expected, atol=1e-10 * bins)


def test_halves_choose_the_four_step_form_on_long_lines():
    assert spectrum_form(540, 271)[0] == "factored"
    assert spectrum_form(8, 5) == ("dense", 1)
    form, d = spectrum_form(1024, 513)
    assert form == "factored" and 1024 % d == 0
    assert spectrum_macs(1024, 513) == half_macs(1024, 513, d) == 2 * d * 1024 + 4 * 1024 * -(
        -513 // d)
    assert spectrum_macs(8, 5) == 2 * 8 * 5


# random 1-D networks whose every block crops (short and long axes, tokens, per-sample norm)
SEEDS = [(5, False), (6, False), (26, False), (58, False),
         (10, True), (11, True), (21, True), (25, True), (35, True)]


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "long"), SEEDS)
def test_stream_as_spectrum_computes_the_static_network(seed, long):
    model = random_model(seed, long=long)
    static = materialize(model, freeze(model))
    assert why_not(static) is None
    tactics = cheapest(tactic_costs(static))
    spectral = lower(static, tactics, spectrum_resample(static))
    assert all(b.resample_tactics == {"down": [SPECTRUM], "up": [SPECTRUM]}
               for b in spectral.blocks)
    x = random_input(model, 3, seed=seed)
    # the same linear maps reordered: float64 rounding only
    exact = carry_spectrum(static, dtype=torch.float64).double()
    x64 = x if model.config.vocab_size else x.double()
    with torch.no_grad():
        ref, out = static.double()(x64), exact(x64)
    assert float((out - ref).abs().max() / ref.abs().max()) < 1e-10
    # and in onnxruntime, float32, against the trained model
    graph = to_onnx(spectral.float(), (x,))
    y = session(graph).run(None, {graph.graph.input[0].name: x.numpy()})[0]
    with torch.no_grad():
        trained = model(x).double().numpy()
    assert np.abs(y - trained).max() / np.abs(trained).max() < 1e-4
    # every node belongs to the encoder, a block or the decoder (per-layer latency is timed
    # and reported by those names): the transforms in and out included
    names = ["encoder", *(f"blocks.{i}" for i in range(len(spectral.blocks))), "decoder"]
    assert list(layers(graph)) == names


def tiny_net(length: int, resolutions: list[int]) -> StaticNet:
    """A hand-built float64 static network, one block per resolution (stream 3, n_in = n_out = 2),
    random weights and resolution-mask values."""
    g = torch.Generator().manual_seed(length)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    blocks = [StaticBlock(i, 3, [Resample(r, -1, torch.rand(r // 2 + 1, generator=g,
                                                            dtype=torch.float64))],
                          SpectralConv(rand(2, max(1, r - 1))), rand(4, 2), rand(4, r), rand(2, 4),
                          rand(2), [Resample(length, -1)])
              for i, r in enumerate(resolutions)]
    encoder = Encoder(rand(3, 2), rand(3), tokens=False)
    decoder = Decoder(rand(5, 3), rand(5), dense=False)
    return StaticNet(encoder, blocks, decoder, {"spatial": [length]}).eval()


@pytest.mark.parametrize("length", [3, 4, 5, 8, 9, 16, 17])
def test_nyquist_and_mirror_edge_cases_are_exact(length):
    """R = 1 and 2 (one or two bins), R = L - 1 and L - 2 (an even and an odd resolution next to
    L: the mirror image of every carried bin must land beyond K), mixed in one network."""
    for resolutions in ([1], [2], [length - 1], [max(1, length - 2)], [2, length - 1, length // 2]):
        net = tiny_net(length, resolutions)
        x = torch.randn(4, 2, length, dtype=torch.float64)
        with torch.no_grad():
            ref, out = net(x), carry_spectrum(net, dtype=torch.float64)(x)
        assert float((out - ref).abs().max() / ref.abs().max()) < 1e-10, resolutions


def test_architecture_records_the_resampling_each_half_stands_for():
    net = carry_spectrum(tiny_net(16, [2, 9]))
    assert [(b.down[0].sizes, b.up[0].sizes) for b in net.blocks] == [
        ((16, 2), (2, 16)), ((16, 9), (9, 16))]
    assert why_not(net) == "its resampling is already lowered per axis"


# 21: three blocks at 72, 72 and 576 samples of 1361; 35: two blocks narrower than the stream
@pytest.mark.parametrize("seed", [21, 35])
def test_theoretical_macs_count_the_spectral_halves(seed):
    model = random_model(seed, long=True)
    static = materialize(model, freeze(model))
    tactics = cheapest(tactic_costs(static))
    per_axis = theoretical_costs(lower(static, tactics, resample_tactics_by_cost(static)))
    spectral = theoretical_costs(lower(static, tactics, spectrum_resample(static)))
    (length,) = model.config.input_size
    resolutions = [int(b.bias1.shape[-1]) for b in static.blocks]
    bins = max(r // 2 + 1 for r in resolutions)
    stream = static.decoder.weight.shape[1]
    assert spectral["encoder"]["theoretical"] - per_axis["encoder"]["theoretical"] == (
        stream * spectrum_macs(length, bins))
    for i, (block, r) in enumerate(zip(static.blocks, resolutions)):
        axis = lower(static, tactics, resample_tactics_by_cost(static)).blocks[i]
        read = axis.read  # n_in, or a direct convolution's padded count (StaticBlock.read_wider)
        resampling = read * axis.down[0].macs() + block.n_out * axis.up[0].macs()
        spectral_resampling = (read * spectrum_macs(r, r // 2 + 1)
                               + block.n_out * spectrum_macs(r, r // 2 + 1))
        # the residual add, and the Slices and Concat of a narrowed block, over 2 K values, not L
        copied = block.n_out + (read < stream) * read + (block.n_out < stream) * stream
        add = copied * (2 * bins - length)
        assert spectral[f"blocks.{i}"]["theoretical"] - per_axis[f"blocks.{i}"]["theoretical"] == (
            pytest.approx(spectral_resampling - resampling + add))
    if static.decoder.weight_max is not None:
        return  # its maximum transforms the stream back (another test)
    # the decoder's mean is read from DC: no pooling over L
    assert per_axis["decoder"]["theoretical"] - spectral["decoder"]["theoretical"] == (
        stream * (length - 1))


@pytest.mark.parametrize(("seed", "long", "reason"), [
    (17, False, "a block computes at the input's full resolution"),
    (0, False, "the decoder is dense (an output per position)"),
    (3, False, "the input is not 1-D"),
])
def test_networks_it_does_not_apply_to_are_refused(seed, long, reason):
    model = random_model(seed, long=long)
    static = materialize(model, freeze(model))
    assert why_not(static) == reason
    with pytest.raises(ValueError, match=re.escape(f"cannot be carried as its spectrum: {reason}")):
        carry_spectrum(static)


def test_spectrum_is_for_every_block_or_none():
    model = random_model(10, long=True)  # two blocks
    static = materialize(model, freeze(model))
    mixed = resample_tactics_by_cost(static)[:1] + spectrum_resample(static)[1:]
    with pytest.raises(ValueError, match="'spectrum' resampling is for every axis of every block"):
        lower(static, ["direct"] * 2, mixed)


@pytest.mark.slow
@pytest.mark.parametrize(("medians", "kept"), [
    ([[2.0, 1.0], [30.0, 20.0]], "spectrum"),
    ([[1.0, 1.0], [20.0, 20.0]], "per-axis"),  # a tie keeps the per-axis resampling
    ([[1.0, 2.0], [30.0, 20.0]], "per-axis"),  # 2x slower at B=1 against 1.5x at B=32
])
def test_the_stream_form_is_chosen_by_measured_whole_networks(monkeypatch, medians, kept):
    model = random_model(58)
    static = materialize(model, freeze(model))
    runs = iter(medians)
    calls = []

    def measure(fns, repeats=20, **kwargs):
        calls.append(len(fns))
        return [{"median_ms": m, "min_ms": m} for m, _ in zip(next(runs), fns, strict=True)]

    monkeypatch.setattr(tune, "measure", measure)
    per_axis = resample_tactics_by_cost(static)
    resample, evidence = policy.fastest_stream(static, ["direct"], per_axis, [1, 32], 1, 3)
    assert calls == [2, 2]  # both networks, side by side, at each batch
    assert evidence["kept"] == kept
    assert evidence["ms_by_batch"] == {"1": dict(zip(["per-axis", "spectrum"], medians[0])),
                                       "32": dict(zip(["per-axis", "spectrum"], medians[1]))}
    assert resample == (spectrum_resample(static) if kept == "spectrum" else per_axis)


def test_the_stream_form_is_not_timed_where_it_does_not_apply(monkeypatch):
    model = random_model(17)
    static = materialize(model, freeze(model))
    monkeypatch.setattr(tune, "measure", lambda *a, **k: pytest.fail("nothing may be timed"))
    per_axis = resample_tactics_by_cost(static)
    resample, evidence = policy.fastest_stream(static, ["direct"] * len(static.blocks), per_axis,
                                               [1, 32])
    assert resample == per_axis
    assert evidence == {"kept": "per-axis", "why": "spectrum not timed: a block computes at the "
                                                   "input's full resolution"}


def test_the_spectral_stream_touches_fewer_samples():
    """The point of it: per block, two transforms of R samples instead of two resamplings through
    L; on a long axis with heavy cropping the whole network does a fraction of the MACs. A
    decoder that pools by the maximum too pays one more transform back to the L samples, and the
    add to the encoder's output."""
    model = random_model(51, long=True)  # two blocks at 80 of 1522 samples, max pooling
    static = materialize(model, freeze(model))
    assert static.decoder.pooling == ["mean", "max"]
    tactics = cheapest(tactic_costs(static))

    def total(net, resample):
        return sum(v["theoretical"] for v in theoretical_costs(lower(net, tactics,
                                                                     resample)).values())

    per_axis = total(static, resample_tactics_by_cost(static))
    spectral = total(static, spectrum_resample(static))
    stream, length = static.decoder.weight.shape[1], static.spec["spatial"][0]
    carried = carry_spectrum(static)
    back, bins = carried.decoder.spectrum.back, carried.encoder.spectrum.out_bins
    assert spectral < 0.6 * per_axis
    mean_only = copy.deepcopy(static)
    mean_only.decoder.weight_max = None  # the same network with a mean-pooling decoder
    assert mean_only.decoder.pooling == ["mean"]
    spectral_mean = total(mean_only, spectrum_resample(mean_only))
    assert spectral_mean < 0.5 * total(mean_only, resample_tactics_by_cost(mean_only))
    # the decoder's difference: the bins' change (2 K values per channel), the transform back
    # and the add (L values), both poolings over the L positions instead of the mean over one
    # value, the max's linear head
    head = static.decoder.weight.shape[0] * stream
    assert spectral - spectral_mean == (stream * 2 * bins + stream * back.macs()
                                        + stream * length + stream * (2 * length - 1) + head)


@pytest.mark.slow
def test_an_export_that_keeps_the_spectrum_ships_it_and_verifies(monkeypatch, tmp_path):
    """Injected timings make the spectrum the faster whole network: the export lowers it, records
    why in architecture.json and report.json, and every artifact still equals the trained model."""
    import json

    from export.pipeline import ExportOptions, export_model

    from .test_export_pipeline import fake_task
    from .test_export_whole_network import injected

    monkeypatch.setattr(policy, "measure_tactics", lambda static, batches, *args: [[
        {"direct": {"median_ms": 1.0, "min_ms": 1.0}} for _ in static.blocks] for _ in batches])
    monkeypatch.setattr(tune, "measure", injected()[0])  # the last candidate is the fastest
    model = random_model(58)
    options = ExportOptions(bench=False, torchscript=False, batch_size=16, repeats=2)
    report = export_model(model, fake_task(model), tmp_path, options)
    arch = json.loads((tmp_path / "architecture.json").read_text())
    saved = json.loads((tmp_path / "report.json").read_text())
    assert [b["resample_tactics"] for b in arch["blocks"]] == [
        {"down": [SPECTRUM], "up": [SPECTRUM]}]
    stream = arch["whole_network"]["stream"]
    assert stream == saved["whole_network"]["stream"] == report.whole_network["stream"]
    assert stream["kept"] == "spectrum" == saved["tuning"]["stream"]
    assert set(stream["ms_by_batch"]) == {"1", "32"}
    assert all(err["max_rel"] <= 1e-4 for err in saved["equivalence"].values())


def test_lowering_a_network_it_does_not_apply_to_says_why():
    model = random_model(17)  # a full-resolution block
    static = materialize(model, freeze(model))
    with pytest.raises(ValueError, match="cannot be carried as its spectrum: a block computes at "
                                         "the input's full resolution"):
        lower(static, ["direct"] * len(static.blocks), spectrum_resample(static))


def test_the_report_says_which_stream_form_a_forced_tactic_shipped():
    from export.pipeline import ExportOptions, tuning_summary

    network = {"stream": {"kept": "spectrum", "why": "..."}}
    assert tuning_summary(ExportOptions(tactic="direct"), network) == {
        "by": "forced", "batches": None, "tactic": "direct", "stream": "spectrum"}
    assert tuning_summary(ExportOptions(tactic="direct", tune=False), None) == {
        "by": "forced", "batches": None, "tactic": "direct"}
