"""The judges of a closed window (the seed's flink-job): each one kind of anomaly, each over
river's online statistics, learning once per window, never per event.

Why these models: every rule is "this window against the subject's own recent past", so a
judge needs a running centre (and for a z-score a spread) that follows a slow drift (a work
getting popular) and costs O(1) memory. ``river.stats.EWMean``/``EWVar`` are exactly that
(exponentially weighted, updated in Rust). Their span is ``spike_warmup_windows``: the
baseline is made of about as many windows as a code must have before it is judged. A
``GaussianScorer`` would give a CDF score, not the "k times the baseline" the settings
state, and ``river.anomaly``'s tree and density models learn per event: too costly here.

Memory is bounded: a judge keeps its subjects in a ``cachetools.TTLCache`` whose clock is
the window index, so a subject not seen for ``detector_forget_s`` of event time is forgotten
and at most ``detector_max_subjects`` are kept (the least recently seen go first).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from cachetools import TTLCache
from river import stats

from .settings import AvccSettings
from .windows import Window


class AnomalyKind(enum.StrEnum):
    """What a judge found (the ``kind`` column)."""

    SPIKE = "spike"
    RATIO = "ratio"
    FLOOD = "flood"
    REVENUE = "revenue"


@dataclass(frozen=True)
class Anomaly:
    """One finding: ``subject`` (a code or a user hash) in the window ``[start, end)``."""

    kind: AnomalyKind
    subject: str
    window_start: int
    window_end: int
    observed: float
    expected: float
    score: float
    detail: Mapping[str, str | int | float] = field(default_factory=dict)


T = TypeVar("T")


class Subjects(Generic[T]):
    """Per-subject models, forgotten when idle for ``ttl_windows`` windows, at most ``cap``."""

    def __init__(self, make: Callable[[], T], cap: int, ttl_windows: int) -> None:
        self._make = make
        self._index = 0
        self._models: TTLCache[str, T] = TTLCache(cap, ttl_windows, timer=lambda: self._index)

    def at(self, window_index: int) -> None:
        """Set the clock: the index of the window being judged."""
        self._index = window_index

    def get(self, subject: str) -> T:
        """The subject's model (a new one when unknown or forgotten); marks it as seen."""
        model = self._models.pop(subject, None)
        if model is None:
            model = self._make()
        self._models[subject] = model  # set again: the TTL counts from the last sighting
        return model

    def __len__(self) -> int:
        return len(self._models)


def fading_factor(span_windows: int) -> float:
    """The EW weight of the newest window for a baseline of about ``span_windows`` windows
    (the usual span convention, alpha = 2 / (span + 1))."""
    return 2.0 / (span_windows + 1)


@dataclass(slots=True)
class _Level:
    """A code's plays per window: EW mean and variance, windows learned, the last one."""

    mean: stats.EWMean
    var: stats.EWVar
    windows: int = 0
    last: int | None = None


class SpikeJudge:
    """A code's plays in a window above ``spike_factor`` × its EW baseline (and at least
    ``spike_min_plays``), once the code has ``spike_warmup_windows`` windows of history.

    Windows without plays count as 0: they are learned when the code shows up again (the
    gap's zeros, at most as many as still move the mean by more than 0.1 %). A window judged
    a spike is not learned, so a long spike is reported for every window it lasts.
    """

    def __init__(self, settings: AvccSettings, width_ms: int) -> None:
        self.factor = settings.spike_factor
        self.min_plays = settings.spike_min_plays
        self.warmup = settings.spike_warmup_windows
        self.width_ms = width_ms
        alpha = fading_factor(settings.spike_warmup_windows)
        # After this many zeros the old mean weighs < 0.1 %: more change nothing we judge by.
        self.max_gap = math.ceil(math.log(1e-3) / math.log(1 - alpha)) if alpha < 1 else 1
        self.codes: Subjects[_Level] = Subjects(
            lambda: _Level(stats.EWMean(alpha), stats.EWVar(alpha)),
            settings.detector_max_subjects,
            _ttl_windows(settings, width_ms),
        )

    def judge(self, window: Window) -> list[Anomaly]:
        """Judge and learn every code that played in ``window``."""
        index = window.start_ms // self.width_ms
        self.codes.at(index)
        found: list[Anomaly] = []
        for code, plays in window.plays.items():
            level = self.codes.get(code)
            if level.last is not None:
                for _ in range(min(index - level.last - 1, self.max_gap)):
                    level.mean.update(0.0)
                    level.var.update(0.0)
                level.windows += index - level.last - 1
            level.last = index
            if level.windows >= self.warmup:
                expected = level.mean.get()
                if plays >= self.min_plays and plays > self.factor * expected:
                    spread = math.sqrt(max(level.var.get(), expected, 1.0))
                    found.append(
                        Anomaly(
                            AnomalyKind.SPIKE,
                            code,
                            window.start_ms,
                            window.end_ms,
                            float(plays),
                            expected,
                            (plays - expected) / spread,
                            {"factor": self.factor, "history_windows": level.windows},
                        )
                    )
                    continue
            level.mean.update(float(plays))
            level.var.update(float(plays))
            level.windows += 1
        return found


@dataclass(slots=True)
class _Ratio:
    """A code's EW completes and plays per window (the baseline ratio is theirs)."""

    completes: stats.EWMean
    plays: stats.EWMean
    windows: int = 0


class RatioJudge:
    """A code's complete/play ratio in a window below ``ratio_floor`` × its baseline, in a
    window of at least ``ratio_min_plays`` plays, after ``spike_warmup_windows`` windows with
    plays. The baseline is EW completes over EW plays (a ratio of means: a window's weight
    is its plays, so thin windows do not shake it). A collapsed window is not learned."""

    def __init__(self, settings: AvccSettings, width_ms: int) -> None:
        self.floor = settings.ratio_floor
        self.min_plays = settings.ratio_min_plays
        self.warmup = settings.spike_warmup_windows
        self.width_ms = width_ms
        alpha = fading_factor(settings.spike_warmup_windows)
        self.codes: Subjects[_Ratio] = Subjects(
            lambda: _Ratio(stats.EWMean(alpha), stats.EWMean(alpha)),
            settings.detector_max_subjects,
            _ttl_windows(settings, width_ms),
        )

    def judge(self, window: Window) -> list[Anomaly]:
        """Judge and learn every code that played in ``window``."""
        self.codes.at(window.start_ms // self.width_ms)
        found: list[Anomaly] = []
        for code, plays in window.plays.items():
            completes = window.completes.get(code, 0)
            model = self.codes.get(code)
            base_plays = model.plays.get()
            if model.windows >= self.warmup and plays >= self.min_plays and base_plays > 0:
                expected = model.completes.get() / base_plays
                observed = completes / plays
                if expected > 0 and observed < self.floor * expected:
                    found.append(
                        Anomaly(
                            AnomalyKind.RATIO,
                            code,
                            window.start_ms,
                            window.end_ms,
                            observed,
                            expected,
                            1.0 - observed / expected,
                            {"plays": plays, "completes": completes, "floor": self.floor},
                        )
                    )
                    continue
            model.completes.update(float(completes))
            model.plays.update(float(plays))
            model.windows += 1
        return found


class FloodJudge:
    """A user hash with at least ``flood_events`` events on one platform node in a window.

    The line is the setting; the expectation reported beside it is the node's EW events per
    active user hash (learned per window without the flooders), so an operator sees how far
    off the flood is. One finding per user hash and window: its worst node.
    """

    def __init__(self, settings: AvccSettings, width_ms: int) -> None:
        self.line = settings.flood_events
        self.width_ms = width_ms
        alpha = fading_factor(settings.spike_warmup_windows)
        self.nodes: Subjects[stats.EWMean] = Subjects(
            lambda: stats.EWMean(alpha),
            settings.detector_max_subjects,
            _ttl_windows(settings, width_ms),
        )

    def judge(self, window: Window) -> list[Anomaly]:
        """Judge the window's user hashes and learn each node's events per user."""
        self.nodes.at(window.start_ms // self.width_ms)
        per_node: dict[str, list[int]] = {}  # node -> [events, users], flooders left out
        floods: dict[str, tuple[str, int]] = {}  # user hash -> (worst node, its events)
        for (node, user), count in window.user_events.items():
            if count >= self.line:
                if count > floods.get(user, ("", 0))[1]:
                    floods[user] = (node, count)
                continue
            totals = per_node.setdefault(node, [0, 0])
            totals[0] += count
            totals[1] += 1
        expected_by_node: dict[str, float] = {}
        for node, (events, users) in per_node.items():
            model = self.nodes.get(node)
            model.update(events / users)
            expected_by_node[node] = model.get()
        return [
            Anomaly(
                AnomalyKind.FLOOD,
                user,
                window.start_ms,
                window.end_ms,
                float(count),
                expected_by_node.get(node, 1.0),
                count / self.line,
                {"platform_node": node, "line": self.line},
            )
            for user, (node, count) in floods.items()
        ]


@dataclass(slots=True)
class _Revenue:
    """A code's revenue per play per window: EW mean and variance."""

    mean: stats.EWMean
    var: stats.EWVar
    windows: int = 0


class RevenueJudge:
    """Revenue out of range, per code and window: a purchase above
    ``revenue_per_purchase_max_cny`` (a fixed line), or revenue per play ``revenue_z``
    deviations off the code's baseline, judged in windows of at least ``ratio_min_plays``
    plays after ``spike_warmup_windows`` such windows.

    The spread is floored at a quarter of the mean: a window's revenue is a few purchases, so
    a quiet run of windows would otherwise shrink the EW variance until an ordinary window
    looks extreme. The baseline's span is four times the warm-up, for the same reason.
    """

    def __init__(self, settings: AvccSettings, width_ms: int) -> None:
        self.max_fen = round(settings.revenue_per_purchase_max_cny * 100)
        self.z = settings.revenue_z
        self.min_plays = settings.ratio_min_plays
        self.warmup = settings.spike_warmup_windows
        self.width_ms = width_ms
        alpha = fading_factor(4 * settings.spike_warmup_windows)
        self.codes: Subjects[_Revenue] = Subjects(
            lambda: _Revenue(stats.EWMean(alpha), stats.EWVar(alpha)),
            settings.detector_max_subjects,
            _ttl_windows(settings, width_ms),
        )

    def judge(self, window: Window) -> list[Anomaly]:
        """Judge every code that played or sold in ``window``; learn those with enough plays."""
        self.codes.at(window.start_ms // self.width_ms)
        found: list[Anomaly] = []
        for code, top in window.top_purchase_fen.items():
            if top > self.max_fen:
                found.append(
                    Anomaly(
                        AnomalyKind.REVENUE,
                        code,
                        window.start_ms,
                        window.end_ms,
                        top / 100,
                        self.max_fen / 100,
                        top / self.max_fen,
                        {"check": "purchase_max", "purchases": window.purchases[code]},
                    )
                )
        over = {a.subject for a in found}
        for code, plays in window.plays.items():
            if plays < self.min_plays or code in over:
                continue
            model = self.codes.get(code)
            per_play = window.revenue_fen.get(code, 0) / 100 / plays
            if model.windows >= self.warmup:
                expected = model.mean.get()
                spread = max(math.sqrt(model.var.get()), expected / 4, 0.01)
                score = (per_play - expected) / spread
                if abs(score) > self.z:
                    found.append(
                        Anomaly(
                            AnomalyKind.REVENUE,
                            code,
                            window.start_ms,
                            window.end_ms,
                            per_play,
                            expected,
                            score,
                            {"check": "per_play", "plays": plays, "z": self.z},
                        )
                    )
                    continue
            model.mean.update(per_play)
            model.var.update(per_play)
            model.windows += 1
        return found


class Detector:
    """Every judge, in a fixed order; :meth:`judge` gives a closed window's anomalies."""

    def __init__(self, settings: AvccSettings) -> None:
        width_ms = settings.detector_window_s * 1000
        self.judges = (
            SpikeJudge(settings, width_ms),
            RatioJudge(settings, width_ms),
            FloodJudge(settings, width_ms),
            RevenueJudge(settings, width_ms),
        )

    def judge(self, windows: Iterable[Window]) -> list[Anomaly]:
        """The anomalies of ``windows`` (closed, oldest first), each judge learning as it goes."""
        return [a for window in windows for judge in self.judges for a in judge.judge(window)]


def _ttl_windows(settings: AvccSettings, width_ms: int) -> int:
    return max(1, settings.detector_forget_s * 1000 // width_ms)
