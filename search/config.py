"""The search configuration: one dataclass of commented defaults, parsed by argparse.

Every field is a flag (``lr`` -> ``--lr``, ``tau_width`` -> ``--tau-width``); its help text is the
``help`` metadata below. The resolved configuration is saved in RUN_DIR/config.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from dnarch_deploy.cli import add_fields, given_flags
from dnarch_deploy.cost import MACS, BatchBlend, Units, latency_units
from dnarch_deploy.latency import DEFAULT_BATCHES, LatencyTable, load_table
from dnarch_deploy.model import (
    BLOCK_NORMS,
    BLOCK_OUTPUTS,
    CROP_RULES,
    MAX_DEPTH,
    MAX_KERNEL_FLOOR,
    MAX_WIDTH,
    POOLINGS,
    ModelConfig,
    canonical_learn,
)

# The automatic training length (--steps 0): AUTO_EPOCHS passes over the training split, clipped
# to [MIN_STEPS, MAX_STEPS] optimiser steps, so that a 40-sample set still gets enough updates and
# a 4000-sample set stops in CPU-scale time (benchmarks/ucr_quality.py measured both ends). 150,
# not 40: at 40 passes (the 2000-step floor) PLAID's 430 series underfit;
# 3900 steps lift it 0.829 -> 0.842, past one std, digits ties at 4000, and MNIST-1D with 500
# training series, not tuned on, gains 0.010 (docs/benchmark_record.md "Training length"). Every
# other bundled set trains for MIN_STEPS or MAX_STEPS either way. A floor of 1000 cost ACSF1 0.064
# (it underfits; benchmarks/results/ucr_quality_min_steps_1000.md); one of 4000 on inputs of 512
# positions or more lifted ACSF1 0.827 -> 0.857 but cost PLAID (3900 -> 4000 steps) 0.875 ->
# 0.854, so it was not kept (the same paragraph). A floor of 1000 on inputs of at most 256
# positions tied in the default search, but broke ArrowHead's budgeted searches, 0.711 -> 0.520
# at budget 0.25 (benchmarks/results/ucr_quality_short_floor.md).
AUTO_EPOCHS = 150
MASK_DATA = ("train", "val")  # --mask-data: the split whose loss steps the mask parameters
MIN_STEPS = 2000
MAX_STEPS = 4000
# The automatic kernel-network frequency prior (--omega-0 0) follows the data. The Fourier
# features' frequencies are N(0, omega_0^2) cycles per unit of the kernel's coordinates [-1, 1],
# which span the input, so two std of them reach 4 omega_0 cycles over the input. omega_0 is set
# so that this is the frequency below which ENERGY_SHARE of the training inputs' energy lies
# (search.train.energy_frequency), never below MIN_OMEGA_0 (the former fixed default). A fixed
# prior cannot fit both smooth and oscillating signals: ACSF1's energy lies at a quarter of the
# sampling rate and above, where omega_0 5 puts no kernel detail (accuracy 0.62; 0.78 at the 182.5
# its spectrum gives); OSULeaf's lies below 10 cycles, and it loses 0.05 at omega_0 14 or 43
# (docs/benchmark_record.md, "A frequency prior from the data").
ENERGY_SHARE = 0.95
MIN_OMEGA_0 = 5.0
# The automatic label smoothing (--label-smoothing left out): SHORT_SMOOTHING on classification
# signals and images of at most SHORT_POSITIONS positions, none on longer ones. Over the bundled
# sets (3 seeds, README "Label smoothing for short inputs") 0.1 lifted every short set that moved
# (ItalyPowerDemand 24 samples, JapaneseVowels 29, ArrowHead 251, digits 8x8) and cost the two long
# ones that moved (OSULeaf 427, PLAID 1344); mnist1d (40 samples), not tuned on, gained too.
SHORT_POSITIONS = 256
SHORT_SMOOTHING = 0.1
# The automatic random shift (--shift left out): SMALL_SET_SHIFT of each axis on training splits
# of fewer than SMALL_SET_SAMPLES samples, none on larger ones. Shifts regularise the sets a
# network memorises in a few hundred steps (ArrowHead 0.50 -> 0.61, OSULeaf 0.67 -> 0.74 when
# adopted, one seed each), but they kept the larger ones from fitting their training split: with
# none, PLAID (430 series) and mnist5k (3500 images) rose past one std, and MNIST-1D with 500
# training series, not tuned on, rose inside one (docs/benchmark_record.md "Shifts for small
# sets only").
SMALL_SET_SAMPLES = 300
SMALL_SET_SHIFT = 0.1
# The automatic jitter (--jitter left out): Gaussian noise of SMALL_SET_JITTER of each sample's
# own std on the same small training splits, none on larger ones. Over the seven bundled sets
# under 300 samples (3 seeds) it lifted ItalyPowerDemand 0.947 -> 0.957 and ArrowHead 0.750 ->
# 0.789, past one std, and tied the rest; on PLAID (430) it gave 0.854 +- 0.016 against 0.872 +-
# 0.012 without, as the shifts did (docs/benchmark_record.md "Jitter for small sets").
SMALL_SET_JITTER = 0.1
# Validations per run, at most: each is a records row, an architecture snapshot and a checkpoint.
ROUNDS = 50


@functools.cache
def _latency_table(path: str, batches: tuple[int, ...]) -> LatencyTable:
    """Loaded once per process: the fall-back warnings are said once."""
    return load_table(path or None, threads=1, batches=batches)


def _f(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}


def _model(name: str, help: str) -> Any:
    """A flag for a ModelConfig field, with ModelConfig's default (the one place for model
    defaults); search.train.model_config copies every such field into the model's config."""
    return _f(_MODEL_DEFAULTS[name], help)


# flags that only choose what the masks learn (search.train.learned): a saved run agrees with any
# values of them that learn what it learned ('--learn KWD --budget 0.5' is the run of
# '--learn KRWD --budget 0.5'; a base run, of any; search.train.learns_as_saved)
LEARN_FLAGS = frozenset({"learn", "crop_min_length", "crop_min_budget"})


@dataclass
class SearchConfig:
    # --- what to learn and on what
    task: str = _f("ucr:GunPoint", "task name (`python -m search.tasks` lists them)")
    task_option: list[str] = _f(None, "task option KEY=VALUE (repeatable), e.g. n_train=200")
    out: str = _f("", "run directory to create (default: runs/<task>-<learn>-s<seed>)")
    learn: str = _model("learn", "what the masks learn: any subset of K,R,W,D (kernel size, "
                        "resolution, width, depth), or 'none' for the fixed base CCNN")
    # On an 8x8 image a crop drops 1-3 samples per axis, and onnxruntime runs the block's two
    # resamplings slower than the convolution they shrink: with R, digits' found networks ran at
    # 1.2-2.1x the base's time at 1/8 to 1 of its MACs, without it at 0.85-1.7x, as accurate or
    # more (docs/benchmark_record.md, "digits without resolution").
    crop_min_length: int = _f(9, "R is learned only on inputs with an axis of at least this many "
                              "samples; on shorter ones every block runs at full resolution "
                              "(0: always)")
    # MACs price a crop's resampling MatMuls like the convolution taps they replace, but
    # onnxruntime runs them several times faster per MAC: under a MAC budget below the base's
    # cost, networks that crop ran at 0.13-0.36 of the base's time at budgets 0.25 and 0.5;
    # without R, MACs and time move together (README, "No resolution under a MAC budget").
    crop_min_budget: float = _f(1.0, "with --cost macs and --lam > 0, R is learned only at "
                                "budgets of at least this (a multiple of the base's cost); below "
                                "it every block runs at full resolution (0: at every budget)")
    # --- the base network CCNN_{D,H} and the budget
    depth: int = _model("depth", "D: blocks of the base network (the search may use up to 2D)")
    width: int = _model("width", "H: channels of the base network (the search may use up to 2H)")
    embed_dim: int = _f(16, "embedding size for token tasks")
    budget: float = _f(1.0, "C_target as a multiple of the base network's cost (> 0)")
    # 5.0, the paper's value for tasks whose objective loss stays high (appendix E: ListOps,
    # CIFAR100), as it does in every short CPU-scale run: with 0.1 the cost ratio drifted to
    # 0.91-0.96 (GunPoint) and 0.78 (OSULeaf); with 5.0 it stays within a few % of 1
    # (benchmarks/results/search_quality.md). Adam normalises step sizes, so the gap is ~1/lambda.
    lam: float = _f(5.0, "lambda: weight of the complexity loss (C/C_target - 1)^2")
    # The paper's §5 proposal: start low, increase. With lambda at full weight from step one the
    # network is pinned to the base before the task loss has shaped any mask; a ramp lets the
    # masks follow the task first, then the budget pulls the cost in.
    lam_ramp: float = _f(0.0, "share of the training steps over which lambda grows linearly "
                         "from 0 to --lam (0: --lam from the first step)")
    # Without it a budget of 0.25 starts the quadratic L_comp at (4.9 - 1)^2 (init / target): the
    # masks are slammed to their minima in the first steps (README "Budget honesty": GunPoint
    # 0.25 with it 0.98, without 0.74; digits 0.93 and 0.32; benchmarks/budget_honesty.py).
    budget_ramp: float = _f(0.5, "share of the training steps over which C_target tightens "
                            "geometrically from the initial network's cost to the budget's "
                            "(0: the budget's from the first step)")
    # The loss keeps the cost near the budget, but a discrete step (a block or a resolution
    # step entering late, when the learning rate is small) can leave an epoch's network over it.
    budget_tolerance: float = _f(
        0.05, "the result is chosen among the validation rounds whose network costs at most "
        "(1 + this) x C_target (over-budget rounds count only until one within it is seen; with "
        "--lam 0, no budget, among all): the latest round whose validation metric, averaged over "
        "its last 5 rounds, is within one standard error of the best such average")
    # MACs by default: machine-independent and exact for the lowered network (the figure export
    # reports); predicted milliseconds come from a per-operator table measured on one machine,
    # which misses what onnxruntime fuses across operators (docs/export.md, "Latency table").
    cost: str = _f("macs", "what the budget counts: macs (multiply-accumulates of the deployed "
                   "network) or latency (its onnxruntime milliseconds, predicted per operator "
                   "from a latency table: python -m export.latency_table)")
    latency_table: str = _f("", "with --cost latency: the table (default: the one measured on "
                            "this machine, else the bundled one)")
    # Export tunes for and measures the same batches (its --batch): a budget priced at batch 1
    # alone held there and missed at 32 (GunPoint's 0.5: 0.47 of the base's time at batch 1,
    # 0.37 at 32; README "Budget honesty").
    latency_batch: list[int] = _f(None, "with --cost latency: a batch size the budget's "
                                  "milliseconds are predicted at (repeatable; default "
                                  f"{' and '.join(map(str, DEFAULT_BATCHES))}); at several, "
                                  "a network's cost over the base's is the mean of its "
                                  "per-batch ratios")
    # The table predicts operators alone and errs most on the base, the budget's reference (8x8:
    # 1.40x its measured time; 251 samples at batch 32: 0.71x), and the machine's speed drifts
    # (up to 1.4x between calls): export.base_latency says why.
    base_ms: list[float] = _f(None, "with --cost latency: the base network's onnxruntime "
                              "milliseconds at each --latency-batch, in order, in the latency "
                              "table's time (repeatable; default: measured on this machine, 1 "
                              "thread, before the search starts, in turns with some of the "
                              "table's points, divided by how much slower than tabled they ran, "
                              "and saved in config.json), of which the budget is a share")
    # The table's points drift with the hour unlike the found network's smaller operators (one
    # fast hour: 0.68x against 0.86x), so a base put in the table's time by a probe misses the
    # budget by the ratio of the two (README "Budget honesty"): the found network itself is the
    # probe that network's budget needs.
    latency_checks: int = _f(2, "with --cost latency: how many times the search exports the "
                             "network its masks describe, times it in turns with the base and "
                             "puts the base's time in that network's (its measured time over "
                             "its predicted), evenly from the end of --budget-ramp to the last "
                             "step (0: never; the base stays as timed before training)")
    # The paper's §5 "multiple constraints": a limit (not a target) beside the budget.
    max_params: int = _f(0, "a limit on the deployed network's parameters (0: none): a second "
                         "complexity term lambda * relu(P / max_params - 1)^2 beside the "
                         "budget's; the result must meet both")
    # --- optimisation (paper appendix E: AdamW, linear warm-up then cosine)
    # Length is counted in optimiser steps, so that a 40-sample set and a 4000-sample set both get
    # enough updates (see training_length); --epochs gives it in passes over the training split.
    steps: int = _f(0, f"optimiser steps in all; 0: {AUTO_EPOCHS} passes over the training "
                    f"split, clipped to [{MIN_STEPS}, {MAX_STEPS}] steps")
    epochs: int = _f(0, "training length in passes over the training split, instead of --steps "
                     "(0: use --steps)")
    batch_size: int = _f(16, "global batch size (split across ranks when distributed)")
    lr: float = _f(0.01, "learning rate of the network weights")
    mask_lr: float = _f(0.01, "learning rate of the mask parameters (no weight decay)")
    mask_data: str = _f("train", "the split whose loss trains the mask parameters: 'train' (one "
                        "step on the training batch, weights and masks together, the paper's) "
                        "or 'val' (first-order bilevel, as DARTS: the weights step on the "
                        "training batch, then the masks on a validation batch, with the "
                        "complexity loss; 1.4-2.5x a run's time, and it lost OSULeaf and "
                        "ArrowHead: docs/benchmark_record.md, \"Masks stepped on validation "
                        "batches\")")
    weight_decay: float = _f(0.01, "AdamW weight decay of the network weights")
    # Modelled on the reference CCNN's penalty on its sampled kernels (there the plain L2 norm of
    # each whole kernel tensor, beside every other weight's; it decays no kernel-network weight).
    # At 0.01 it tied the default on ArrowHead, OSULeaf, ACSF1 and four short bundled sets and
    # lowered both sets the defaults never saw (PickupGestureWiimoteZ 0.800 -> 0.712, UnitTest
    # 0.818 -> 0.788), so it is off (benchmarks/results/ucr_quality_kernel_trials.md).
    kernel_decay: float = _f(0.0, "weight of a penalty on the kernels: each block's sampled, "
                             "masked kernels' squared norm per channel, averaged over its "
                             "channels and summed over blocks, added to the training loss "
                             "(0: off)")
    warmup: float = _f(0.05, "share of the training steps in linear learning-rate warm-up")
    dropout: float = _model("dropout", "dropout after the block's GELU")
    # not 0: None ('auto') is resolved per task (search.train.label_smoothing)
    label_smoothing: float | None = _f(
        None, "classification: the training loss's cross-entropy against targets smoothed by "
        f"this share (0: off; validation and test losses are plain); default: {SHORT_SMOOTHING:g} "
        f"on signals and images of at most {SHORT_POSITIONS} positions (e.g. a {SHORT_POSITIONS}-"
        "sample series, a 16x16 image), 0 on longer ones")
    mixup: float = _f(0.0, "classification on signals and images: blend each training sample "
                      "and its target with another of the batch by a weight drawn from "
                      "Beta(alpha, alpha); this is alpha (0: off)")
    pool: str = _model("pool", "classification decoder's pooling over positions: 'avgmax' (the "
                       "mean and the maximum of every channel, one linear head on both) or "
                       "'avg' (the mean only, the paper's)")
    block_norm: str = _model("block_norm", "where each block's BatchNorm sits: 'mix' (on the "
                             "output of the first pointwise mixing, after the convolution, as a "
                             "plain CNN's conv-BN-activation) or 'input' (on the block's input, "
                             "the paper's pre-norm CCNN block)")
    block_output: str = _model("block_output", "what each block adds to the stream: 'pointwise' "
                               "(a second pointwise mixing of the GELU's output, the paper's "
                               "CCNN block) or 'gelu' (the GELU's output itself: a "
                               "conv-BN-GELU layer with a skip, about half the pointwise MACs; "
                               "needs --block-norm mix)")
    crop: str = _model("crop", "when a block crops an axis whose resolution is learned: 'bin' "
                       "(from the first frequency bin past the resolution mask's threshold, the "
                       "paper's) or 'pays' (only once the cropped block costs fewer deployed "
                       "MACs than at full resolution, where the mask filters the convolution's "
                       "spectrum)")
    # not ModelConfig's default: 'auto' is resolved per task (search.train.input_norm)
    input_norm: str = _f("auto", "input normalisation: 'sample' (each sample's channels to mean 0, "
                         "std 1), 'dataset' (the training set's channel statistics), or 'auto': "
                         "sample for classification when the training samples' scales spread over "
                         "two orders of magnitude (10th to 90th percentile), else dataset")
    # not 0: None ('auto') is resolved per task (search.train.small_set_share)
    shift: float | None = _f(
        None, "random shift of each training input, at most this share of each axis either way "
        "(classification on signals and images only; 0: off); default: "
        f"{SMALL_SET_SHIFT:g} when the training split has fewer than {SMALL_SET_SAMPLES} samples, "
        "0 on larger ones")
    # not 0: None ('auto') is resolved per task (search.train.small_set_share)
    jitter: float | None = _f(
        None, "Gaussian noise added to each training input, its std this share of the sample's "
        "own std per channel (classification on signals and images only; 0: off); default: "
        f"{SMALL_SET_JITTER:g} when the training split has fewer than {SMALL_SET_SAMPLES} "
        "samples, 0 on larger ones")
    restarts: int = _f(1, "restart a run whose training loss has stalled (still above half the "
                       "first round's after 30% of the steps; not judged with --mixup) from a new "
                       "initialisation, at most this many times")
    # --- kernel network and masks
    # not ModelConfig's default: 0 ('auto') is resolved per task (search.train.frequency_prior)
    omega_0: float = _f(0.0, "frequency prior of the kernel network's Fourier features (their "
                        "frequencies' std, in cycles per unit of the kernel's coordinates "
                        "[-1, 1]); 0: automatic, from the training inputs' spectrum: their "
                        f"frequencies reach, at two std, the one below which {ENERGY_SHARE:.0%} "
                        f"of the inputs' energy lies (at least {MIN_OMEGA_0:g})")
    initial_kernel: int = _model("initial_kernel", "with K learned: kernels start global on axes "
                                 "up to this many taps and at this size, centred, on longer ones "
                                 "(odd; 0: global everywhere)")
    kernel_floor: float = _model("kernel_floor", "with K learned: the shortest kernel, as a share "
                                 "of the longest on each axis, at full resolution (its "
                                 "half-width: that share of the longest kernel's taps, halved "
                                 "and rounded down; at least 3 taps; 0: 3 taps)")
    tau_resolution: float = _model("tau_resolution", "temperature of the resolution masks")
    tau_width: float = _model("tau_width", "temperature of the width masks")
    tau_depth: float = _model("tau_depth", "temperature of the depth mask")
    # --- running
    seed: int = _f(0, "random seed (data order, initialisation, dropout)")
    device: str = _f("auto", "auto, cpu or cuda")
    amp: bool = _f(True, "bfloat16 autocast on CUDA (ignored on CPU)")
    resume: bool = _f(False, "continue RUN_DIR from its last checkpoint")
    allow_data_change: bool = _f(False, "with --resume: continue although the task's data "
                                 "differ from the fingerprint in config.json")
    eval_batch_size: int = _f(256, "batch size for validation and test")

    def __post_init__(self):
        self.task_option = list(self.task_option or [])
        if isinstance(self.latency_batch, int):  # a run saved when the flag took one batch
            self.latency_batch = [self.latency_batch]
        self.latency_batch = list(dict.fromkeys(self.latency_batch or DEFAULT_BATCHES))
        self.base_ms = list(self.base_ms or [])

    def validate(self) -> None:
        """User errors in the flags: one message naming the flag."""
        checks = [
            (self.budget > 0, f"--budget must be > 0 (a multiple of the base cost), "
             f"got {self.budget}"),
            (self.steps >= 0, f"--steps must be >= 0 (0: automatic), got {self.steps}"),
            (self.epochs >= 0, f"--epochs must be >= 0 (0: use --steps), got {self.epochs}"),
            (not (self.steps and self.epochs), f"give --steps or --epochs, not both "
             f"(got --steps {self.steps} and --epochs {self.epochs})"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.eval_batch_size >= 1, f"--eval-batch-size must be >= 1, "
             f"got {self.eval_batch_size}"),
            (self.depth >= 1 and self.width >= 1, "--depth and --width must be >= 1"),
            (self.lr > 0 and self.mask_lr >= 0, "--lr must be > 0 and --mask-lr >= 0"),
            (self.lam >= 0, f"--lam must be >= 0, got {self.lam}"),
            (self.mask_data in MASK_DATA, f"--mask-data must be one of {', '.join(MASK_DATA)}, "
             f"got {self.mask_data!r}"),
            (0 <= self.lam_ramp <= 1, f"--lam-ramp must be in [0, 1], got {self.lam_ramp}"),
            (0 <= self.budget_ramp <= 1, f"--budget-ramp must be in [0, 1], "
             f"got {self.budget_ramp}"),
            (self.crop_min_length >= 0, f"--crop-min-length must be >= 0 (0: always), "
             f"got {self.crop_min_length}"),
            (self.crop_min_budget >= 0, f"--crop-min-budget must be >= 0 (0: at every budget), "
             f"got {self.crop_min_budget}"),
            (self.max_params >= 0, f"--max-params must be >= 0 (0: no limit), "
             f"got {self.max_params}"),
            (self.cost in ("macs", "latency"), f"--cost must be macs or latency, "
             f"got {self.cost!r}"),
            (min(self.latency_batch) >= 1, f"every --latency-batch must be >= 1, "
             f"got {self.latency_batch}"),
            (not self.base_ms or self.cost == "latency",
             "--base-ms is the base's time for --cost latency; this run counts --cost macs"),
            (not self.base_ms or len(self.base_ms) == len(self.latency_batch),
             f"--base-ms needs one time per --latency-batch {self.latency_batch}, "
             f"got {self.base_ms}"),
            (all(math.isfinite(ms) and ms > 0 for ms in self.base_ms),
             f"every --base-ms must be a finite number > 0, "
             f"got {self.base_ms}"),
            (self.latency_checks >= 0, f"--latency-checks must be >= 0, "
             f"got {self.latency_checks}"),
            (self.budget_tolerance >= 0, f"--budget-tolerance must be >= 0, "
             f"got {self.budget_tolerance}"),
            (0 <= self.dropout < 1, f"--dropout must be in [0, 1), got {self.dropout}"),
            (self.label_smoothing is None or 0 <= self.label_smoothing < 1,
             f"--label-smoothing must be in [0, 1), got {self.label_smoothing}"),
            (self.mixup >= 0, f"--mixup must be >= 0 (0: off), got {self.mixup}"),
            (self.shift is None or 0 <= self.shift < 1,
             f"--shift must be in [0, 1), got {self.shift}"),
            (self.jitter is None or self.jitter >= 0,
             f"--jitter must be >= 0 (0: off), got {self.jitter}"),
            (self.kernel_decay >= 0, f"--kernel-decay must be >= 0 (0: off), "
             f"got {self.kernel_decay}"),
            (self.restarts >= 0, f"--restarts must be >= 0, got {self.restarts}"),
            (self.crop in CROP_RULES, f"--crop must be one of {', '.join(CROP_RULES)}, "
             f"got {self.crop!r}"),
            (self.input_norm in ("auto", "sample", "dataset"), f"--input-norm must be auto, "
             f"sample or dataset, got {self.input_norm!r}"),
            (self.pool in POOLINGS, f"--pool must be one of {', '.join(POOLINGS)}, "
             f"got {self.pool!r}"),
            (self.block_norm in BLOCK_NORMS, f"--block-norm must be one of "
             f"{', '.join(BLOCK_NORMS)}, got {self.block_norm!r}"),
            (self.block_output in BLOCK_OUTPUTS, f"--block-output must be one of "
             f"{', '.join(BLOCK_OUTPUTS)}, got {self.block_output!r}"),
            (self.block_output != "gelu" or self.block_norm == "mix", "--block-output gelu "
             f"needs --block-norm mix (the GELU reads the normalised mixing), got "
             f"--block-norm {self.block_norm}"),
            (0 <= self.warmup < 1, f"--warmup must be in [0, 1) (a share of the steps), "
             f"got {self.warmup}"),
            (self.device in ("auto", "cpu", "cuda"), f"--device must be auto, cpu or cuda, "
             f"got {self.device!r}"),
            (min(self.tau_resolution, self.tau_width, self.tau_depth) > 0,
             "--tau-* must be > 0"),
            (0 <= self.kernel_floor <= MAX_KERNEL_FLOOR, f"--kernel-floor must be in "
             f"[0, {MAX_KERNEL_FLOOR}] (a share of the longest kernel), got {self.kernel_floor}"),
            (self.omega_0 >= 0, f"--omega-0 must be >= 0 (0: automatic), got {self.omega_0}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        for f in dataclasses.fields(self):  # inf/nan pass the range checks above
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"--{f.name.replace('_', '-')} must be a finite number, "
                                 f"got {value}")
        for flag, value, limit in (("--width", self.width, MAX_WIDTH),
                                   ("--depth", self.depth, MAX_DEPTH),
                                   ("--embed-dim", self.embed_dim, MAX_WIDTH)):
            if not 1 <= value <= limit:
                raise ValueError(f"{flag} must be in 1..{limit}, got {value}")
        try:
            canonical_learn(self.learn)  # ModelConfig's check, its message naming the flag
        except ValueError as e:
            raise ValueError(f"--{e}") from None
        if self.learn.lower() == "none" and self.budget != 1.0:
            raise ValueError(f"--learn none trains the fixed base CCNN, whose cost is fixed: "
                             f"--budget {self.budget} cannot be met (leave it at 1.0)")

    def cost_units(self, mcfg) -> Units | BatchBlend:
        """What the budget counts (--cost) for the model of ``mcfg``: MACs, or predicted
        milliseconds from the latency table (a table that cannot be used warns and falls back
        to the bundled one) at --latency-batch (several: blended by the base network's), the base's
        from --base-ms (none: predicted)."""
        if self.cost == "macs":
            return MACS
        batches = tuple(self.latency_batch)
        return latency_units(_latency_table(self.latency_table, batches), batches, mcfg,
                             self.base_ms)

    def latency_table_here(self) -> bool:
        """Whether --cost latency prices with a table measured on this machine (its CPU and
        versions, 1 thread). Only then are the table's milliseconds this machine's and the base's
        measured time their reference; another machine's table prices the base too, so that a
        ratio does not mix two machines."""
        table = _latency_table(self.latency_table, tuple(self.latency_batch))
        return not table.differences(threads=1)

    def task_options(self) -> dict[str, Any]:
        """--task-option KEY=VALUE pairs, values parsed as int/float/bool where they look so."""
        options = {}
        for item in self.task_option:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"--task-option expects KEY=VALUE, got {item!r}")
            options[key.strip()] = _parse_value(value.strip())
        return options

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Length:
    """How long a run trains and how often it validates. A round is the unit of the records
    (their ``epoch`` field), the checkpoints and the result rule: one pass over the training
    split with --epochs, or steps / ROUNDS (at least one pass) with --steps."""

    steps: int  # optimiser steps in all
    steps_per_epoch: int  # full batches in one pass over the training split
    per_round: int  # steps between two validations


def training_length(cfg: SearchConfig, n_train: int) -> Length:
    """--steps / --epochs resolved for a training split of n_train samples."""
    per_epoch = max(n_train // cfg.batch_size, 1)  # full batches only
    if cfg.epochs:
        return Length(cfg.epochs * per_epoch, per_epoch, per_epoch)
    steps = cfg.steps or min(max(AUTO_EPOCHS * per_epoch, MIN_STEPS), MAX_STEPS)
    return Length(steps, per_epoch, max(per_epoch, math.ceil(steps / ROUNDS)))


def _parse_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m search.run",
        description="Learn a CNN's architecture (kernel sizes, resolution, widths, depth) by "
        "backpropagation under a compute budget (DNArch), writing a run directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_fields(parser, SearchConfig)
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[SearchConfig, set[str]]:
    """The config and the names of the flags the user actually gave (for resume checks)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return SearchConfig(**vars(args)), given_flags(parser, argv)
