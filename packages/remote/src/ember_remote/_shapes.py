"""Result shapes from input shapes and params, without running anything: core's shape rules.

The client uses them to pipeline: it makes a result tensor (with its shape) before the server
has run the op.  The server uses the same rules to check an op before running it (a hostile
message with inconsistent params is refused, and a result over the size limits is refused
before it is allocated) and after (a kernel whose result differs from the rule is an error,
never a silently wrong shape).  An op without a rule (``nonzero``, whose size is its data's)
still runs: its result's shape is asked of the server when someone reads it (a round trip).

The rules are core's own (`ember.ops.RULES`, one per op, also what every device checks before
a kernel runs); this module names them for Remote.  A rule returns one shape for a one-output
op, a list of shapes for a multi-output one, and raises `ValueError` (`ember.ShapeError`)
where the shapes and params cannot go together.
"""

from __future__ import annotations

from ember.ops import RULES, Shape, numel

__all__ = ["RULES", "Shape", "numel"]
