"""ember's Learner: fit/validate loops, metrics, checkpoints, resume, dashboard, plots.

Examples
--------
>>> import ember_train
>>> ember_train.EarlyStopping("valid/loss", patience=2).mode
'min'
"""

from __future__ import annotations

from ._artifacts import Artifacts as Artifacts
from ._checkpoint import (
    Checkpointer as Checkpointer,
    CheckpointInfo as CheckpointInfo,
)
from ._early_stopping import (
    EarlyStopping as EarlyStopping,
    MetricTracker as MetricTracker,
)
from ._learner import (
    FitResult as FitResult,
    Learner as Learner,
)
from ._metrics import (
    F1 as F1,
    Accuracy as Accuracy,
    EpochTime as EpochTime,
    LearningRate as LearningRate,
    Loss as Loss,
    Metric as Metric,
    Precision as Precision,
    ProcessMemory as ProcessMemory,
    Recall as Recall,
    StepView as StepView,
    Throughput as Throughput,
    TopKAccuracy as TopKAccuracy,
    default_metrics as default_metrics,
)
from ._render import (
    PlainRenderer as PlainRenderer,
    ProgressRenderer as ProgressRenderer,
    Renderer as Renderer,
    RunView as RunView,
)
from ._rng import RandomStreams as RandomStreams
from ._state import (
    load_state as load_state,
    save_state as save_state,
)
from ._steps import (
    AccumulatedGradients as AccumulatedGradients,
    StepOutput as StepOutput,
)

__all__ = [
    "F1",
    "Accuracy",
    "AccumulatedGradients",
    "Artifacts",
    "CheckpointInfo",
    "Checkpointer",
    "EarlyStopping",
    "EpochTime",
    "FitResult",
    "LearningRate",
    "Learner",
    "Loss",
    "Metric",
    "MetricTracker",
    "PlainRenderer",
    "Precision",
    "ProcessMemory",
    "ProgressRenderer",
    "RandomStreams",
    "Recall",
    "Renderer",
    "RunView",
    "StepOutput",
    "StepView",
    "Throughput",
    "TopKAccuracy",
    "default_metrics",
    "load_state",
    "save_state",
]

__version__ = "0.1.0"
