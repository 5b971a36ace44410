"""The architecture JSON: describe -> JSON -> read back is lossless; damaged files get a
SchemaError that names the file and the field."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from dnarch_deploy import Architecture, SchemaError, compare_with_base, describe, set_masks
from dnarch_deploy.architecture import VERSION

from .helpers import set_mask_state, tiny_model

MODELS = {
    "1d-init": (dict(input_size=(17,)), "init"),
    "1d-random": (dict(input_size=(40,)), "random"),
    "2d-dense-extremes": (dict(input_size=(9, 12), dense=True), "extremes"),
    "base-ccnn": (dict(input_size=(16,), learn="none"), "init"),
}


def architecture(case: str, epoch: int | None = 3) -> Architecture:
    kwargs, state = MODELS[case]
    model = tiny_model(1, **kwargs)
    set_mask_state(model, state, seed=1)
    return describe(model, epoch=epoch)


@pytest.mark.parametrize("case", MODELS)
def test_round_trip(case, tmp_path):
    arch = architecture(case)
    assert Architecture.from_dict(json.loads(arch.to_json())) == arch
    path = tmp_path / "architecture.json"
    arch.save(path)
    assert Architecture.load(path) == arch
    assert list(tmp_path.iterdir()) == [path]  # the atomic write left no temporary file


@pytest.mark.parametrize("case", MODELS)
def test_describe_follows_the_plan(case):
    kwargs, state = MODELS[case]
    model = tiny_model(1, **kwargs)
    set_mask_state(model, state, seed=1)
    arch, plan = describe(model), model.plan()
    assert arch.depth == len(arch.blocks) == len(plan.blocks)
    assert arch.stream_width == plan.stream and arch.max_width == model.config.max_width
    assert arch.version == VERSION and arch.learn == model.config.learn
    for b, p in zip(arch.blocks, plan.blocks):
        assert (b.index, b.n_in, b.n_mid, b.n_out) == (p.index, p.n_in, p.n_mid, p.n_out)
        assert b.resolution == list(p.resolution) and b.kernel_size == list(p.kernel_size)
        assert b.kernel_taps == [2 * h + 1 for h in p.half_taps]
        assert 0.0 < b.depth_weight <= 1.0


def _set(path: list, value):
    def change(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return d

    return change


def _delete(path: list):
    def change(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
        return d

    return change


DAMAGES = {
    "missing-field": (_delete(["stream_width"]), "missing field 'stream_width'"),
    "missing-block-field": (_delete(["blocks", 0, "n_in"]), "missing field 'blocks\\[0\\].n_in'"),
    "wrong-type": (
        _set(["in_channels"], "2"),
        "field 'in_channels' must be an integer >= 1, got '2'",
    ),
    "bool-is-not-int": (_set(["depth"], True), "field 'depth' must be an integer >= 0, got True"),
    "bad-block-list": (
        _set(["blocks", 1, "kernel_size"], [0]),
        "field 'blocks\\[1\\].kernel_size' must be a list of 1 or 2 integers >= 1, got \\[0\\]",
    ),
    "depth-weight-range": (
        _set(["blocks", 0, "depth_weight"], 1.5),
        "field 'blocks\\[0\\].depth_weight' must be a number in \\[0, 1\\], got 1.5",
    ),
    "wrong-version": (_set(["version"], VERSION + 1), f"field 'version' is {VERSION + 1}"),
    "wrong-schema": (_set(["schema"], "onnx"), "field 'schema' must be 'dnarch-architecture'"),
    "depth-not-len-blocks": (
        _set(["depth"], 3),
        "field 'depth' must be the number of blocks \\(2\\)",
    ),
    "blocks-not-a-list": (_set(["blocks"], {}), "field 'blocks'"),
    "block-not-an-object": (_set(["blocks", 0], 7), "field 'blocks\\[0\\]' must be a JSON object"),
    "negative-epoch": (_set(["epoch"], -1), "field 'epoch' must be null or an integer >= 0"),
    "not-an-object": (lambda d: [d], "must be a JSON object"),
    "axes": (
        _set(["blocks", 0, "cropped"], [True, False]),
        "field 'blocks\\[0\\].cropped' must be one entry per input axis \\(1\\)",
    ),
    "conv-taps-type": (
        _set(["blocks", 1, "conv_taps"], [0]),
        "field 'blocks\\[1\\].conv_taps' must be a list of 1 or 2 integers >= 1",
    ),
    "pooling": (
        _set(["pooling"], []),  # a global decoder pools
        "field 'pooling' must be null or one of \\[\\['mean'\\], \\['mean', 'max'\\]\\] "
        "\\(dense: False\\), got \\[\\]",
    ),
    "pooling-max-alone": (
        _set(["pooling"], ["max"]),
        "field 'pooling' must be null or one of .*, got \\['max'\\]",
    ),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_file_names_file_and_field(damage, tmp_path):
    change, message = DAMAGES[damage]
    data = change(json.loads(architecture("1d-init").to_json()))
    path = tmp_path / "architecture.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=message) as error:
        Architecture.load(path)
    assert str(error.value).startswith(f"{path}: ")
    assert isinstance(error.value, ValueError)


def test_truncated_and_missing_files(tmp_path):
    path = tmp_path / "architecture.json"
    text = architecture("2d-dense-extremes").to_json()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(SchemaError, match=f"^{path}: not valid JSON"):
        Architecture.load(path)
    with pytest.raises(SchemaError, match="file not found"):
        Architecture.load(tmp_path / "missing.json")


# --- set_masks: describe's inverse -----------------------------------------------------------

REPLAY_CASES = {
    "1d": dict(input_size=(40,)),
    "1d-long": dict(input_size=(300,), width=3),  # resolutions on fast FFT lengths
    "2d-dense": dict(input_size=(9, 12), dense=True),
    "tokens": dict(input_size=(16,), vocab_size=11, in_channels=5),
    "learn-KR": dict(input_size=(33,), learn="KR"),
    "learn-WD": dict(input_size=(20,), learn="WD"),
    "base-ccnn": dict(input_size=(16,), learn="none"),
}


def sizes(arch: Architecture) -> dict:
    """Everything describe reports but the mask values (depth weights) and the epoch."""
    data = arch.to_dict()
    for block in data["blocks"]:
        block.pop("depth_weight")
    data.pop("epoch")
    return data


@pytest.mark.parametrize("state", ["init", "random", "extremes", "min", "max"])
@pytest.mark.parametrize("case", REPLAY_CASES.values(), ids=REPLAY_CASES.keys())
def test_set_masks_replays_a_described_architecture(case, state):
    """A fresh model (other weights, masks at initialisation) given the architecture another
    model describes, describes the same sizes; its forward runs at them."""
    for seed in range(4):
        source = tiny_model(seed, **case)
        set_mask_state(source, state, seed)
        found = describe(source)
        fresh = tiny_model(seed + 100, **case)
        set_masks(fresh, found)
        assert sizes(describe(fresh)) == sizes(found)
        plan = fresh.plan()
        assert [(p.n_in, p.n_mid, p.n_out, p.resolution) for p in plan.blocks] == [
            (b.n_in, b.n_mid, b.n_out, tuple(b.resolution)) for b in found.blocks]


def test_set_masks_keeps_masks_in_range():
    model = tiny_model(0, input_size=(40,))
    set_mask_state(model, "random", 3)
    found = describe(model)
    fresh = tiny_model(1, input_size=(40,))
    set_masks(fresh, found)
    before = {n: p.detach().clone() for n, p in fresh.named_parameters() if n.startswith("mask_")}
    fresh.clamp_masks_()
    for name, p in fresh.named_parameters():
        if name.startswith("mask_"):
            assert torch.equal(p, before[name]), name  # clamping moves nothing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: setattr(a.blocks[0], "n_mid", 99), r"blocks\[0\]\.n_mid = 99"),
        (lambda a: setattr(a, "input_size", [18]), r"'input_size' is \[18\]"),
        (lambda a: setattr(a.blocks[1], "index", 3), r"indices \[0, 3\]"),
        (lambda a: setattr(a.blocks[0], "resolution", [8]), r"blocks\[0\]\.resolution = 8"),
        (lambda a: setattr(a, "pooling", ["mean"]),
         r"'pooling' is \['mean'\]; the model has \['mean', 'max'\]"),
    ],
    ids=["width", "input", "index", "resolution", "pooling"],
)
def test_set_masks_names_what_the_model_cannot_hold(change, message):
    model = tiny_model(0, input_size=(17,))
    found = describe(model)
    change(found)
    with pytest.raises(ValueError, match=message):
        set_masks(tiny_model(1, input_size=(17,)), found)


def test_set_masks_needs_the_learned_mask():
    """A base CCNN has no width mask: a narrower block cannot be replayed into it."""
    narrow = tiny_model(0, input_size=(16,))
    set_mask_state(narrow, "min", 0)
    with pytest.raises(ValueError, match="learn='none'"):
        set_masks(tiny_model(0, input_size=(16,), learn="none"), describe(narrow))


def test_compare_with_base_is_zero_for_the_base_and_follows_its_definition():
    """distance = mean over depth, width, resolution and kernel of |log2(found / base)|."""
    model = tiny_model(1, input_size=(16,), learn="none")
    c = model.config
    base = compare_with_base(describe(model), c.depth, c.width)
    assert base["distance"] == 0.0 and base["depth"] == base["base_depth"] == c.depth
    assert base["width_range"] == [c.width, c.width] and base["resolution"] == [[1.0]] * c.depth
    # half the resolution in every block and twice the depth, nothing else: (1 + 0 + 1 + 0) / 4
    arch = describe(model)
    block = arch.blocks[0]
    arch.blocks = [dataclasses.replace(block, index=i, resolution=[8]) for i in range(2 * c.depth)]
    arch.depth = 2 * c.depth
    far = compare_with_base(arch, c.depth, c.width)
    assert far["distance"] == 0.5 and far["resolution"] == [[0.5]] * (2 * c.depth)
    # a kernel spanning a third of the largest (15 taps at S = 16), one block at half width
    arch = describe(model)
    arch.blocks = [dataclasses.replace(arch.blocks[0], kernel_size=[5], n_in=c.width // 2,
                                       n_mid=c.width // 2, n_out=c.width // 2)]
    arch.depth = 1
    got = compare_with_base(arch, c.depth, c.width)
    expected = (math.log2(c.depth) + 1 + 0 + math.log2(3)) / 4
    assert got["distance"] == pytest.approx(expected, abs=1e-4)
    assert got["kernel_size"] == [[5]] and got["width_range"] == [c.width // 2] * 2


def test_files_from_before_pooling_was_recorded_read_as_mean_pooling(tmp_path):
    """An architecture.json without ``pooling`` was written when every global decoder pooled by
    the mean alone (and a dense one pooled nothing)."""
    for dense, expected in ((False, ["mean"]), (True, [])):
        data = json.loads(architecture("2d-dense-extremes" if dense else "1d-init").to_json())
        assert data.pop("pooling") == ([] if dense else ["mean", "max"])
        path = tmp_path / "architecture.json"
        path.write_text(json.dumps(data))
        old = Architecture.load(path)
        assert old.pooling is None and old.decoder_pooling() == expected
