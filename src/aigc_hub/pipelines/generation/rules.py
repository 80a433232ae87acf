"""Generation's pure decisions: no I/O, no clock, no database; each is table-tested
(``tests/unit/test_generation_core.py``).

* :func:`cheapest_first` — the routing order among capable providers (§3.6.3);
* :func:`fair_order` — which QUEUED task goes next: weighted fair share across tenants, then
  priority aging within a tenant (seed 004 §3.6.3, §3.9.4);
* :func:`slot_scopes` — the permits an attempt holds (§3.5.4);
* :func:`next_poll` — when to ask a provider again: exponential backoff with jitter (§3.6.4);
* :func:`provider_part_over`, :func:`is_reordered`, :func:`ended_by_provider` — how the one
  state handler reacts to an observation (§3.6.4, §3.7.2).
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aigc_hub.core.retry import RetryPolicy
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.states import TaskStatus


@dataclass(frozen=True)
class Route:
    """A provider chosen for a request, with its estimate."""

    provider: str
    model: str
    estimated_cost: int


def cheapest_first(routes: Sequence[Route]) -> list[Route]:
    """``routes`` (in configured preference order) cheapest estimate first; equal estimates
    keep their configured order."""
    return sorted(routes, key=lambda route: route.estimated_cost)  # sorted() is stable


@dataclass(frozen=True)
class Queued:
    """A QUEUED task as the scheduler's fair order sees it."""

    id: str
    tenant_id: str
    priority: int
    queued_at: int


def fair_order(
    queued: list[Queued],
    active: Mapping[str, int],
    now_ms: int,
    aging_ms: float,
    weights: Mapping[str, float] | None = None,
) -> list[Queued]:
    """``queued`` in dispatch order: the tenant with the least active work per unit of weight
    first (weighted fair share; weight 1 unless ``weights`` says otherwise), then effective
    priority within a tenant."""
    weight = {t: max((weights or {}).get(t, 1.0), 0.001) for t in {q.tenant_id for q in queued}}
    per_tenant: dict[str, list[tuple[float, int, str, Queued]]] = {}
    for q in queued:
        effective = q.priority + (now_ms - q.queued_at) / aging_ms
        per_tenant.setdefault(q.tenant_id, []).append((-effective, q.queued_at, q.id, q))
    for items in per_tenant.values():
        items.sort()
    load = Counter({t: active.get(t, 0) for t in per_tenant})
    # Min-heap of (tenant load per weight, its next task's queue time, tenant).
    heap = [(load[t] / weight[t], items[0][1], t) for t, items in per_tenant.items()]
    heapq.heapify(heap)
    cursor = {t: 0 for t in per_tenant}
    out: list[Queued] = []
    while heap:
        _, _, tenant = heapq.heappop(heap)
        items = per_tenant[tenant]
        out.append(items[cursor[tenant]][3])
        cursor[tenant] += 1
        load[tenant] += 1
        if cursor[tenant] < len(items):
            heapq.heappush(heap, (load[tenant] / weight[tenant], items[cursor[tenant]][1], tenant))
    return out


def slot_scopes(tenant_id: str, route: Route) -> list[tuple[str, str]]:
    """The permits an attempt on ``route`` holds (seed 004 §3.5.4): one of the platform's, its
    tenant's, its provider's and its provider model's."""
    return [
        ("platform", ""),
        ("tenant", tenant_id),
        ("provider", route.provider),
        ("model", f"{route.provider}:{route.model}"),
    ]


@functools.lru_cache(maxsize=8)
def poll_policy(first_s: float, max_s: float) -> RetryPolicy:
    """Polls double from ``first_s`` to ``max_s``, spread ±20 %. Polling never gives up on its
    own (the task's deadline ends it), so only the policy's delays are used."""
    return RetryPolicy(base=first_s, factor=2.0, cap=max_s, jitter=0.2)


def next_poll(
    settings: GenerationSettings,
    polls: int,
    now_ms: int,
    *,
    terminal: bool,
    spread: float | None = None,
) -> int | None:
    """When to poll after ``polls`` polls: the poll policy's delay (``spread`` in [-1, 1]
    fixes its jitter, else it is drawn); None once the job is terminal."""
    if terminal:
        return None
    policy = poll_policy(settings.poll_first_s, settings.poll_max_s)
    return now_ms + int(policy.jittered(polls + 1, spread=spread) * 1000)


def provider_part_over(status: TaskStatus) -> bool:
    """True when a task in ``status`` takes no more news from its provider (it ended, or its
    output is being fetched or processed)."""
    return status.terminal or status in (TaskStatus.OUTPUT_FETCHING, TaskStatus.POST_PROCESSING)


def is_reordered(
    seen: NormalizedStatus, observed_at_ms: int | None, known_at_ms: int | None
) -> bool:
    """True when a non-terminal observation is older, by the provider's clock, than the one
    already recorded (a reordered webhook); a terminal one is never dropped this way."""
    if seen.terminal or observed_at_ms is None or known_at_ms is None:
        return False
    return observed_at_ms < known_at_ms


def ended_by_provider(
    status: TaskStatus, seen: NormalizedStatus, error_code: str | None
) -> tuple[TaskStatus, dict[str, Any]]:
    """The task's next state and failure fields when its provider reports ``seen`` (FAILED
    or CANCELED): CANCELED when the tenant had asked to stop, else FAILED with its reason."""
    if status is TaskStatus.CANCEL_REQUESTED:  # the tenant asked, the provider stopped
        return TaskStatus.CANCELED, {}
    if seen is NormalizedStatus.CANCELED:
        return TaskStatus.FAILED, {"failure_class": "provider", "failure_code": "canceled"}
    return TaskStatus.FAILED, {
        "failure_class": "provider",
        "failure_code": error_code or "provider_failed",
    }


def fetch_is_urgent(expires_at_ms: int | None, now_ms: int, settings: GenerationSettings) -> bool:
    """An output whose URL stops working within ``urgent_fetch_within_s`` goes on the urgent
    queue (seed 004 §3.9.3-4); one with no stated expiry does not."""
    if expires_at_ms is None:
        return False
    return expires_at_ms - now_ms <= settings.urgent_fetch_within_s * 1000
