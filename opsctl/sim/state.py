"""What every endpoint of the simulator shares: the current behaviour, the server's lifecycle,
and sglang's error answer.
"""

from __future__ import annotations

import asyncio

from opsctl.sim.config import Behaviour
from opsctl.sim.wire import Response, json_response

# The error type of a body the request model rejects: http_server's RequestValidationError
# handler answers ErrorResponse(type=HTTPStatus.BAD_REQUEST.phrase, code=400) (0.5.23).
INVALID_REQUEST = "Bad Request"


class ApiError(Exception):
    """Answered as sglang's ErrorResponse JSON with the given status."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.err_type = err_type

    def response(self) -> Response:
        return json_response(self.status, {
            "object": "error", "message": str(self), "type": self.err_type,
            "param": None, "code": self.status,
        })


class BehaviourBox:
    """The one mutable holder of the current Behaviour (replaced whole by the admin endpoint)."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.current = behaviour

    def get(self) -> Behaviour:
        return self.current


class Lifecycle:
    """ServerStatus as the endpoints see it: starting, up, or exiting after SIGTERM."""

    def __init__(self, box: BehaviourBox) -> None:
        self._box = box
        self.listening_since: float | None = None
        self.load_seconds = 0.0
        self.exiting = False
        # Set when a health probe times out (ServerStatus.UnHealthy); a later good probe clears it.
        self.unhealthy = False

    def starting(self) -> bool:
        if self.listening_since is None:
            return True
        now = asyncio.get_running_loop().time()
        return now < self.listening_since + self._box.get().warmup_seconds

    def startup_times(self) -> dict[str, float]:
        """tokenizer_manager.startup_time as /server_info reports it (phases in seconds)."""
        load = self.load_seconds
        return {"load_weight": load, "kv_cache_allocation": 0.0, "scheduler_e2e": load,
                "tokenizer_e2e": load}
