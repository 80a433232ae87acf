"""A real local EVM node for tests: py-evm (through eth-tester) served over HTTP JSON-RPC.

It runs in its own process, so the code under test talks to it exactly as to a remote node:
over a socket, with its own failures (refused connections, JSON-RPC errors). Every sent
transaction is mined at once (eth-tester's auto-mining), so a test never waits for a block.

Run it by hand with ``python -m tests.support.evm_node --port 8545``, or in a test with
:func:`running_node`, which starts it on a free port and stops it after the block::

    with running_node() as node:
        anchorer = EvmAnchorer(engine, node.url, node.private_keys[0])

web3's :class:`~web3.providers.eth_tester.EthereumTesterProvider` already maps JSON-RPC
method names onto eth-tester and translates its field names; this module only adds the HTTP
server around it and turns results into JSON-RPC's encoding (quantities as hex strings).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: How many prefunded accounts the node has (eth-tester's default).
ACCOUNTS = 10
#: JSON-RPC's error code for a reverted execution, and the one nodes use for the rest.
REVERTED = 3
SERVER_ERROR = -32000

ROOT = Path(__file__).resolve().parents[2]


def default_private_keys() -> list[str]:
    """The keys of eth-tester's prefunded accounts: the integers 1..10 as 32-byte keys."""
    # eth_tester.backends.pyevm.main.get_default_account_keys derives them this way; they
    # are public test keys, never usable anywhere else.
    return ["0x" + index.to_bytes(32, "big").hex() for index in range(1, ACCOUNTS + 1)]


def to_json_rpc(value: Any) -> Any:
    """eth-tester's result in JSON-RPC's encoding: integers as hex quantities, bytes as hex."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return hex(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, Mapping):
        return {str(key): to_json_rpc(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_rpc(item) for item in value]
    raise TypeError(f"cannot encode {type(value).__name__} for JSON-RPC")


def make_dispatcher() -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A function answering one JSON-RPC request object from a fresh in-memory chain."""
    from eth_tester import EthereumTester  # type: ignore[import-untyped]
    from eth_tester.exceptions import TransactionFailed  # type: ignore[import-untyped]
    from web3 import Web3
    from web3.providers.eth_tester import EthereumTesterProvider

    tester = EthereumTester()  # py-evm backend, auto-mining: each transaction is a block
    provider = EthereumTesterProvider(tester)
    # No client middleware: only the provider's own, which translates the wire format to
    # eth-tester's; the HTTP client on the other side applies web3's formatters itself.
    w3 = Web3(provider, middleware=[])
    call = provider.request_func(w3, w3.middleware_onion)
    pool = FutureNoncePool(call, tester.get_nonce)
    lock = threading.Lock()  # eth-tester is not thread-safe; the server's threads queue here

    def dispatch(request: Mapping[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request.get("id")}
        method, params = request["method"], request.get("params", [])
        try:
            with lock:
                if method == "eth_sendRawTransaction":
                    response = pool.send(params[0])
                else:
                    response = call(method, params)
        except TransactionFailed as exc:
            reply["error"] = {"code": REVERTED, "message": str(exc)}
            return reply
        except Exception as exc:  # every other failure is the node's answer, not a crash
            reply["error"] = {"code": SERVER_ERROR, "message": f"{type(exc).__name__}: {exc}"}
            return reply
        if "error" in response:
            reply["error"] = dict(response["error"])
        else:
            reply["result"] = to_json_rpc(with_wire_transactions(response.get("result")))
        return reply

    return dispatch


class FutureNoncePool:
    """What a real node's pool does and eth-tester does not: hold a transaction whose nonce
    is ahead of its account's, and run it once the gap is filled.

    Without it, transactions signed in nonce order but arriving out of order (concurrent
    senders) would be refused here where a real node accepts them.
    """

    def __init__(self, call: Callable[[str, Any], Any], nonce_of: Callable[[str], int]) -> None:
        self._call = call
        self._nonce_of = nonce_of
        self._held: dict[tuple[str, int], str] = {}

    def send(self, raw_hex: str) -> Any:
        """``eth_sendRawTransaction``: run it now, or hold it until its nonce is next."""
        from eth_account import Account
        from eth_utils.crypto import keccak

        raw = bytes.fromhex(raw_hex.removeprefix("0x"))
        sender = Account.recover_transaction(raw)
        nonce = transaction_nonce(raw)
        if nonce > self._nonce_of(sender):
            self._held[(sender, nonce)] = raw_hex
            return {"result": "0x" + keccak(raw).hex()}
        response = self._call("eth_sendRawTransaction", [raw_hex])
        while (key := (sender, self._nonce_of(sender))) in self._held:
            self._call("eth_sendRawTransaction", [self._held.pop(key)])
        return response


def transaction_nonce(raw: bytes) -> int:
    """The nonce of a signed transaction: legacy RLP, or a typed (EIP-2718) envelope."""
    import rlp  # type: ignore[import-untyped]

    if raw[0] >= 0xC0:  # an RLP list: a legacy transaction, the nonce first
        return int.from_bytes(rlp.decode(raw)[0], "big")
    return int.from_bytes(rlp.decode(raw[1:])[1], "big")  # typed: chain id, then nonce


def with_wire_transactions(result: Any) -> Any:
    """A block's full transactions under JSON-RPC's field names (``input``, ``blockNumber``…):
    web3's tester middleware renames the block's own fields but not its transactions'."""
    from web3.providers.eth_tester.middleware import (
        transaction_result_formatter,
        transaction_result_remapper,
    )

    if not isinstance(result, Mapping) or not isinstance(result.get("transactions"), list):
        return result
    transactions = [
        transaction_result_formatter(transaction_result_remapper(tx))
        if isinstance(tx, Mapping)
        else tx
        for tx in result["transactions"]
    ]
    return {**result, "transactions": transactions}


def make_server(port: int) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:``port`` (0: any free port) answering JSON-RPC POSTs."""
    dispatch = make_dispatcher()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as clients pool their connections

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if isinstance(body, list):
                answer: Any = [dispatch(item) for item in body]
            else:
                answer = dispatch(body)
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: tests read failures from the client side

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


@dataclass(frozen=True)
class EvmNode:
    """A running node: its JSON-RPC URL and the private keys of its prefunded accounts."""

    url: str
    private_keys: list[str]


def rpc(url: str, method: str, params: list[Any] | None = None, *, timeout: float = 5.0) -> Any:
    """One blocking JSON-RPC call; its ``result``, or RuntimeError with the node's error."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []})
    request = urllib.request.Request(
        url, body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


@contextlib.contextmanager
def running_node(*, start_timeout: float = 60.0) -> Iterator[EvmNode]:
    """Start a node process on a free port; yield it once it answers ``eth_chainId``."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.evm_node", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        url = _read_url(process, start_timeout)
        rpc(url, "eth_chainId")
        yield EvmNode(url=url, private_keys=default_private_keys())
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def _read_url(process: subprocess.Popen[str], timeout: float) -> str:
    # The child prints its URL once its socket is bound: the signal that it is up.
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"the EVM node did not start within {timeout}s")
    return line.strip()


def main(argv: list[str] | None = None) -> None:
    """Serve a fresh chain until killed; print the URL first (the readiness signal)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8545, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = make_server(args.port)
    host, port = server.server_address[:2]
    print(f"http://{host!s}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
