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
from dnarch_deploy.model import INPUT_NORMS, ModelConfig

# The automatic training length (--steps 0): AUTO_EPOCHS passes over the training split, clipped
# to [MIN_STEPS, MAX_STEPS] steps, so small sets get enough updates and large ones stop in CPU-scale
# time (docs/search.md "Training length").
AUTO_EPOCHS = 150
MIN_STEPS = 2000
MAX_STEPS = 4000
# --omega-0 0: the kernel network's frequency prior from the data, so that ENERGY_SHARE of the
# training inputs' energy lies within its reach, never below MIN_OMEGA_0 (docs/search.md).
ENERGY_SHARE = 0.95
MIN_OMEGA_0 = 5.0
# --label-smoothing left out: SHORT_SMOOTHING on inputs of at most SHORT_POSITIONS positions,
# none on longer ones (docs/search.md "Label smoothing").
SHORT_POSITIONS = 256
SHORT_SMOOTHING = 0.1
# --shift and --jitter left out: on for training splits under SMALL_SET_SAMPLES samples, which a
# network memorises, off on larger ones (docs/search.md "Augmentation").
SMALL_SET_SAMPLES = 300
SMALL_SET_SHIFT = 0.1
SMALL_SET_JITTER = 0.1
# Validations per run, at most: each is a records row, an architecture snapshot and a checkpoint.
ROUNDS = 50
# Token tasks (ListOps): the embedding's size, the network's input channels.
EMBED_DIM = 16

# --help's groups, in order; RESEARCH is shown by --help-all alone.
DATA, LEARN, TRAINING, OUTPUT = ("task and data", "what to learn and the budget", "training",
                                 "output and device")
RESEARCH = "research knobs (docs/search.md)"


@functools.cache
def _latency_table(path: str, batches: tuple[int, ...]) -> LatencyTable:
    """Loaded once per process: the fall-back warnings are said once."""
    return load_table(path or None, threads=1, batches=batches)


def _f(default: Any, group: str, help: str) -> Any:
    return field(default=default, metadata={"help": help, "group": group})


_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}


def _model(name: str, group: str, help: str) -> Any:
    """A flag for a ModelConfig field, with ModelConfig's default (the one place for model
    defaults); search.resolve.model_config copies every such field into the model's config."""
    return _f(_MODEL_DEFAULTS[name], group, help)


# flags that only choose what the masks learn (search.resolve.learned): a saved run agrees with any
# values of them that learn what it learned ('--learn KWD --budget 0.5' is the run of
# '--learn KRWD --budget 0.5'; a base run, of any; search.resolve.learns_as_saved)
LEARN_FLAGS = frozenset({"learn", "crop_min_length", "crop_min_budget"})


@dataclass
class SearchConfig:
    """Every field is a flag; docs/search.md gives each one's reason for its default."""

    # --- task and data
    task: str = _f("ucr:GunPoint", DATA, "task name (`python -m search.tasks` lists them)")
    task_option: list[str] = _f(None, DATA, "task option KEY=VALUE (repeatable), e.g. "
                                "n_train=200")
    # not ModelConfig's default: 'auto' is resolved per task (search.resolve.input_norm)
    input_norm: str = _f("auto", DATA, "'sample' (each sample's channels to mean 0, std 1), "
                         "'dataset' (the training set's statistics), or 'auto': by the data")
    seed: int = _f(0, DATA, "random seed (data order, initialisation, dropout)")
    # --- what to learn and the budget
    learn: str = _model("learn", LEARN, "what the masks learn: a subset of K,R,W,D (kernel size, "
                        "resolution, width, depth), or 'none' (the base CCNN)")
    depth: int = _model("depth", LEARN, "D: blocks of the base network (the search may use up "
                        "to 2D)")
    width: int = _model("width", LEARN, "H: channels of the base network (the search may use "
                        "up to 2H)")
    budget: float = _f(1.0, LEARN, "C_target as a multiple of the base network's cost (> 0)")
    # 5.0, the paper's value where the objective loss stays high, as in short CPU-scale runs
    lam: float = _f(5.0, LEARN, "lambda: weight of the complexity loss (C/C_target - 1)^2 "
                    "(0: no budget)")
    # MACs: machine-independent and exact for the lowered network (docs/cost.md)
    cost: str = _f("macs", LEARN, "what the budget counts: macs (of the deployed network) or "
                   "latency (its onnxruntime milliseconds, from a latency table)")
    latency_table: str = _f("", LEARN, "with --cost latency: the table (default: this "
                            "machine's, else the bundled one)")
    # export tunes for and measures the same batches: a budget priced at one missed at the other
    latency_batch: list[int] = _f(None, LEARN, "with --cost latency: a batch size the budget "
                                  "is priced at (repeatable; default "
                                  f"{' and '.join(map(str, DEFAULT_BATCHES))})")
    # the paper's §5 "multiple constraints": a limit (not a target) beside the budget
    max_params: int = _f(0, LEARN, "a limit on the deployed network's parameters (0: none)")
    # --- training (paper appendix E: AdamW, linear warm-up then cosine)
    steps: int = _f(0, TRAINING, f"optimiser steps; 0: {AUTO_EPOCHS} passes over the training "
                    f"split, clipped to [{MIN_STEPS}, {MAX_STEPS}]")
    epochs: int = _f(0, TRAINING, "training length in passes over the training split, instead "
                     "of --steps (0: use --steps)")
    batch_size: int = _f(16, TRAINING, "global batch size (split across ranks when "
                         "distributed)")
    lr: float = _f(0.01, TRAINING, "learning rate of the network weights")
    mask_lr: float = _f(0.01, TRAINING, "learning rate of the mask parameters (no weight decay)")
    weight_decay: float = _f(0.01, TRAINING, "AdamW weight decay of the network weights")
    dropout: float = _model("dropout", TRAINING, "dropout after the block's GELU")
    # None ('auto') is resolved per task (search.resolve.label_smoothing)
    label_smoothing: float | None = _f(
        None, TRAINING, f"classification: smooth the training targets by this share; default "
        f"{SHORT_SMOOTHING:g} on inputs of at most {SHORT_POSITIONS} positions, else 0")
    # None ('auto') is resolved per task (search.resolve.small_set_share)
    shift: float | None = _f(
        None, TRAINING, "random shift of each training input, at most this share of each axis; "
        f"default {SMALL_SET_SHIFT:g} on training splits under {SMALL_SET_SAMPLES} samples, else 0")
    jitter: float | None = _f(
        None, TRAINING, "Gaussian noise on each training input, this share of its std; default "
        f"{SMALL_SET_JITTER:g} on training splits under {SMALL_SET_SAMPLES} samples, else 0")
    # --- output and device
    out: str = _f("", OUTPUT, "run directory to create (default: runs/<task>-<learn>-s<seed>)")
    resume: bool = _f(False, OUTPUT, "continue RUN_DIR from its last checkpoint")
    allow_data_change: bool = _f(False, OUTPUT, "with --resume: continue although the task's "
                                 "data differ from the fingerprint in config.json")
    device: str = _f("auto", OUTPUT, "auto, cpu or cuda")
    amp: bool = _f(True, OUTPUT, "bfloat16 autocast on CUDA (ignored on CPU)")
    # --- research knobs (--help-all)
    # without it a budget of 0.25 slams every mask to its minimum in the first steps
    budget_ramp: float = _f(0.5, RESEARCH, "share of the steps over which C_target tightens "
                            "geometrically from the initial network's cost to the budget's")
    budget_tolerance: float = _f(0.05, RESEARCH, "the result is the latest good round costing at "
                                 "most (1 + this) x C_target (docs/search.md \"Result rule\")")
    # on an 8x8 image onnxruntime runs a crop's two resamplings slower than what they shrink
    crop_min_length: int = _f(9, RESEARCH, "R is learned only on inputs with an axis of at "
                              "least this many samples (0: always)")
    # MACs underprice a crop's resampling MatMuls (docs/cost.md)
    crop_min_budget: float = _f(1.0, RESEARCH, "with --cost macs and --lam > 0, R is learned only "
                                "at budgets of at least this (0: at every budget)")
    crop: str = _model("crop", RESEARCH, "when a block crops: 'bin' (from the first bin under "
                       "the threshold, the paper's) or 'pays' (once it saves MACs)")
    base_ms: list[float] = _f(None, RESEARCH, "with --cost latency: the base network's "
                              "milliseconds per --latency-batch (repeatable; default: timed here)")
    latency_checks: int = _f(2, RESEARCH, "with --cost latency: how many times the search times "
                             "the network its masks describe beside the base (0: never)")
    warmup: float = _f(0.05, RESEARCH, "share of the training steps in linear learning-rate "
                       "warm-up")
    restarts: int = _f(1, RESEARCH, "restart a run whose training loss stalled from a new "
                       "initialisation, at most this many times")
    # 0 ('auto') is resolved per task (search.resolve.frequency_prior)
    omega_0: float = _f(0.0, RESEARCH, "frequency prior of the kernel network's Fourier features "
                        "(0: from the training inputs' spectrum)")
    tau_resolution: float = _model("tau_resolution", RESEARCH, "temperature of the resolution "
                                   "masks")
    tau_width: float = _model("tau_width", RESEARCH, "temperature of the width masks")
    tau_depth: float = _model("tau_depth", RESEARCH, "temperature of the depth mask")
    pool: str = _model("pool", RESEARCH, "classification decoder's pooling: 'avgmax' (mean and "
                       "maximum) or 'avg' (the mean, the paper's)")
    eval_batch_size: int = _f(256, RESEARCH, "batch size for validation and test")

    def __post_init__(self):
        self.task_option = list(self.task_option or [])
        if isinstance(self.latency_batch, int):  # a run saved when the flag took one batch
            self.latency_batch = [self.latency_batch]
        self.latency_batch = list(dict.fromkeys(self.latency_batch or DEFAULT_BATCHES))
        self.base_ms = list(self.base_ms or [])

    def validate(self) -> None:
        """User errors in the flags: one message naming the flag. The model's fields are checked
        by ModelConfig, once (:meth:`model_fields`)."""
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
            (self.lr > 0 and self.mask_lr >= 0, "--lr must be > 0 and --mask-lr >= 0"),
            (self.lam >= 0, f"--lam must be >= 0, got {self.lam}"),
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
            (self.label_smoothing is None or 0 <= self.label_smoothing < 1,
             f"--label-smoothing must be in [0, 1), got {self.label_smoothing}"),
            (self.shift is None or 0 <= self.shift < 1,
             f"--shift must be in [0, 1), got {self.shift}"),
            (self.jitter is None or self.jitter >= 0,
             f"--jitter must be >= 0 (0: off), got {self.jitter}"),
            (self.restarts >= 0, f"--restarts must be >= 0, got {self.restarts}"),
            (self.input_norm in ("auto", *INPUT_NORMS), f"--input-norm must be auto, "
             f"sample or dataset, got {self.input_norm!r}"),
            (0 <= self.warmup < 1, f"--warmup must be in [0, 1) (a share of the steps), "
             f"got {self.warmup}"),
            (self.device in ("auto", "cpu", "cuda"), f"--device must be auto, cpu or cuda, "
             f"got {self.device!r}"),
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
        self.model_fields()
        if self.learn.lower() == "none" and self.budget != 1.0:
            raise ValueError(f"--learn none trains the fixed base CCNN, whose cost is fixed: "
                             f"--budget {self.budget} cannot be met (leave it at 1.0)")

    def model_fields(self) -> dict[str, Any]:
        """The flags that are ModelConfig fields, checked by ModelConfig on a stand-in task: a
        ValueError names the flag (ModelConfig's messages begin with the field's name)."""
        resolved_per_task = {"input_norm", "omega_0"}  # 'auto' here, a value in the model
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name in _MODEL_DEFAULTS and f.name not in resolved_per_task}
        try:
            ModelConfig(in_channels=1, out_channels=1, input_size=(1,), **shared)
        except ValueError as e:
            name, _, rest = str(e).partition(" ")
            raise ValueError(f"--{name.replace('_', '-')} {rest}") from None
        return shared

    def cost_units(self, mcfg, base_ms: list[float] | None = None) -> Units | BatchBlend:
        """What the budget counts (--cost) for the model of ``mcfg``: MACs, or predicted
        milliseconds from the latency table (a table that cannot be used warns and falls back
        to the bundled one) at --latency-batch (several: blended by the base network's), the base's
        from ``base_ms`` (default --base-ms; none: predicted)."""
        if self.cost == "macs":
            return MACS
        batches = tuple(self.latency_batch)
        return latency_units(_latency_table(self.latency_table, batches), batches, mcfg,
                             self.base_ms if base_ms is None else list(base_ms))

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


def build_parser(show_all: bool = False) -> argparse.ArgumentParser:
    """search.run's parser: the everyday flags in four groups; the research knobs are parsed
    always and listed by --help-all alone."""
    parser = argparse.ArgumentParser(
        prog="python -m search.run",
        description="Learn a CNN's architecture (kernel sizes, resolution, widths, depth) by "
        "backpropagation under a compute budget (DNArch), writing a run directory.",
        epilog="Every flag and the reason for its default: docs/search.md.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--help-all", action=_HelpAll, help="show the research knobs too, and "
                        "exit")
    add_fields(parser, SearchConfig, hidden=() if show_all else (RESEARCH,))
    return parser


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown, at 100 columns: every flag's help in at most two lines."""

    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=32, width=100)

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        return getattr(action.type, "__name__", "value").upper()  # INT, FLOAT, STR

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, ""):  # "default: None" says nothing; the help says what
            return action.help
        return super()._get_help_string(action)


class _HelpAll(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        build_parser(show_all=True).print_help()
        parser.exit()


def parse_args(argv: list[str] | None = None) -> tuple[SearchConfig, set[str]]:
    """The config and the names of the flags the user actually gave (for resume checks)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return SearchConfig(**vars(args)), given_flags(parser, argv)
