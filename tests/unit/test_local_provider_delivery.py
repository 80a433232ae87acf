"""The local provider's webhook sender: ordered, signed, retried on its RetryPolicy, given up."""

from __future__ import annotations

import time

import httpx

from aigc_hub.core.retry import RetryPolicy
from aigc_hub.providers.local.delivery import REDELIVERY, WebhookSender
from aigc_hub.providers.local.faults import FaultState
from aigc_hub.reliability import webhooks

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FAST = RetryPolicy(base=0.001, factor=2.0, cap=0.004, max_retries=3)


class Receiver:
    """An HTTP receiver that answers 503 to its first ``failures`` posts, then 200."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.posts: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.posts.append(request)
        return httpx.Response(503 if len(self.posts) <= self.failures else 200)


async def send_one(receiver: Receiver) -> FaultState:
    faults = FaultState()
    async with httpx.AsyncClient(transport=httpx.MockTransport(receiver)) as http:
        sender = WebhookSender(SECRET, faults, http, retry=FAST)
        sender.publish("j1", "http://hub.test/cb", 1, {"id": "j1"}, final=True)
        await sender.flush()
        await sender.close()
    return faults


async def test_a_failed_post_is_sent_again_with_the_same_id_until_it_is_taken() -> None:
    receiver = Receiver(failures=2)

    faults = await send_one(receiver)

    assert len(receiver.posts) == 3
    assert {p.headers["webhook-id"] for p in receiver.posts} == {"msg_j1_1"}
    for post in receiver.posts:
        webhooks.verify([SECRET], dict(post.headers), post.content, now_s=time.time())
    assert (faults.webhooks_sent, faults.webhooks_failed) == (1, 0)


async def test_after_the_policys_retries_the_event_is_given_up() -> None:
    receiver = Receiver(failures=99)

    faults = await send_one(receiver)

    assert len(receiver.posts) == 1 + FAST.max_retries
    assert (faults.webhooks_sent, faults.webhooks_failed) == (0, 1)


def test_redeliveries_wait_a_doubling_delay() -> None:
    assert [REDELIVERY.jittered(n) for n in (1, 2, 3)] == [0.2, 0.4, 0.8]
    assert REDELIVERY.max_retries == 3
