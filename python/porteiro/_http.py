"""What every framework integration shares: the 429 answer porteirod gives."""

import json

from ._porteiro import Limits

#: The body of a denial (JSON, as porteirod's /v1/check answers).
def denial_body(decision):
    """The JSON body of a 429: the decision's numbers."""
    return json.dumps(
        {
            "allowed": False,
            "limit": decision.limit,
            "remaining": decision.remaining,
            "reset_ms": decision.reset_ms,
            "retry_after_ms": decision.retry_after_ms,
        },
        separators=(",", ":"),
    ).encode()


def as_limits(limits, name=None):
    """A Limits object for limits given as text (parsed once) or as Limits
    (a policy of the limiter's config, or Limits(text, name))."""
    if isinstance(limits, Limits):
        return limits
    return Limits(limits, name) if name is not None else Limits(limits)


def resolve(limiter, limits, name=None):
    """limits: text, a Limits, or "policy:NAME" for a policy of the
    limiter's config file."""
    if isinstance(limits, str) and limits.startswith("policy:"):
        return limiter.policy(limits[len("policy:"):])
    return as_limits(limits, name)


#: porteirod's answer when Redis failed and on_error is "error".
UNAVAILABLE_STATUS = 503


def unavailable_body(exc):
    """The JSON body of a 503: the limiter could not decide (on_error "error")."""
    return json.dumps({"error": "rate limiter unavailable: %s" % exc}, separators=(",", ":")).encode()


#: porteirod's answer to a request whose key is missing (an empty key).
BAD_REQUEST_STATUS = 400


def bad_request_body(exc):
    """The JSON body of a 400: the key function gave an empty key."""
    return json.dumps({"error": "missing key: %s" % exc}, separators=(",", ":")).encode()
