#!/usr/bin/python3
"""rls_client.py - a real gRPC client (grpcio) for porteirod's tests.

    rls_client.py HOST:PORT DESCRIPTOR_SET SCRIPT

With PORTEIRO_GRPC_CA set (a PEM file), the channel is TLS, trusting that
certificate, for the name "localhost". The messages are built from the
descriptor set protoc-c wrote for
daemon/grpc/rls.proto. SCRIPT holds one JSON call per line; for each, one JSON line
is printed with the answer:

  {"method": "rls", "domain": "d", "hits": 0, "timeout": 5,
   "descriptors": [{"entries": [["k", "v"]], "limit": [5, "SECOND"], "hits": 5}],
   "ndesc": N, "key_size": N}      (N copies of the first descriptor / a key of
                                    N bytes, made here)
  {"method": "health", "service": ""}
  {"method": "raw", "path": "/a.B/C", "hex": "0a01", "size": N}
                                   (any bytes as the request message; size: N
                                    bytes of 0x0a)
  {"parallel": [call, ...]}        (all at once on the channel; one answer line
                                    per call, in call order, each with "rank":
                                    the order it completed in)
  {"align_ms": 1000, "at": 50}     (no answer: waits until the wall clock is
                                    50 ms into a 1000 ms window)
  {"sleep_ms": N}                  (no answer)
Any call with "repeat": N is made N times, one after the other.

An answer: {"grpc": "OK" | status name, "message": "...", "overall": "OK",
"statuses": [[code, remaining, requests_per_unit, unit, name, reset_ms]...],
"headers": [[k, v]...], "nstatuses": N} (statuses only when fewer than 20).
"""
import json
import os
import sys
import threading
import time

import grpc
from google.protobuf import descriptor_pb2, message_factory

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH = "/grpc.health.v1.Health/Check"


def load(path):
    with open(path, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    return message_factory.GetMessages(fds.file)


class Client:
    def __init__(self, target, desc):
        m = load(desc)
        self.Request = m["pdrls.Request"]
        self.Response = m["pdrls.Response"]
        self.HReq = m["pdrls.HealthCheckRequest"]
        self.HResp = m["pdrls.HealthCheckResponse"]
        self.units = self.Request.DESCRIPTOR.fields_by_name["descriptors"].message_type \
            .fields_by_name["limit"].message_type.fields_by_name["unit"].enum_type
        options = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 64 << 20)]
        ca = os.environ.get("PORTEIRO_GRPC_CA")
        if ca:
            with open(ca, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            options.append(("grpc.ssl_target_name_override", "localhost"))
            self.ch = grpc.secure_channel(target, creds, options=options)
        else:
            self.ch = grpc.insecure_channel(target, options=options)

    def request(self, call):
        """(path, bytes, decode) for one call."""
        method = call.get("method", "rls")
        if method == "health":
            return HEALTH, self.HReq(service=call.get("service", "")).SerializeToString(), "health"
        if method == "raw":
            body = bytes.fromhex(call.get("hex", "")) + b"\n" * call.get("size", 0)
            return call.get("path", RLS), body, "rls"
        r = self.Request(domain=call.get("domain", "").encode(), hits_addend=call.get("hits", 0))
        descs = call.get("descriptors", [])
        if "ndesc" in call:
            descs = descs[:1] * call["ndesc"]
        for i, d in enumerate(descs):
            pd = r.descriptors.add()
            for j, (k, v) in enumerate(d.get("entries", [])):
                if i == 0 and j == 0 and "key_size" in call:
                    k = "k" * call["key_size"]
                pd.entries.add(key=k.encode(), value=v.encode())
            if "limit" in d:
                pd.limit.requests_per_unit = d["limit"][0]
                pd.limit.unit = self.units.values_by_name[d["limit"][1]].number
            if "hits" in d:
                pd.hits_addend.value = d["hits"]
        return RLS, r.SerializeToString(), "rls"

    def answer(self, decode, data=None, err=None):
        if err is not None:
            return {"grpc": err.code().name, "message": err.details() or ""}
        out = {"grpc": "OK", "message": ""}
        if decode == "health":
            h = self.HResp.FromString(data)
            out["health"] = self.HResp.DESCRIPTOR.enum_types_by_name["ServingStatus"] \
                .values_by_number[h.status].name
            return out
        r = self.Response.FromString(data)
        code = lambda c: ["UNKNOWN", "OK", "OVER_LIMIT"][c] if c < 3 else str(c)
        out["overall"] = code(r.overall_code)
        out["nstatuses"] = len(r.statuses)
        if len(r.statuses) < 20:
            out["statuses"] = [[code(s.code), s.limit_remaining,
                                s.current_limit.requests_per_unit if s.HasField("current_limit") else None,
                                self.units.values_by_number[s.current_limit.unit].name
                                if s.HasField("current_limit") else None,
                                s.current_limit.name if s.HasField("current_limit") else None,
                                s.duration_until_reset.seconds * 1000 +
                                s.duration_until_reset.nanos // 1000000
                                if s.HasField("duration_until_reset") else None]
                               for s in r.statuses]
        out["headers"] = [[h.key, h.value] for h in r.response_headers_to_add]
        return out

    def stub(self, path):
        return self.ch.unary_unary(path, request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)

    def call(self, call):
        path, body, decode = self.request(call)
        try:
            data = self.stub(path)(body, timeout=call.get("timeout", 10))
            return self.answer(decode, data)
        except grpc.RpcError as e:
            return self.answer(decode, err=e)

    def parallel(self, calls):
        futures, ranks, lock = [], {}, threading.Lock()
        for i, c in enumerate(calls):
            path, body, decode = self.request(c)
            f = self.stub(path).future(body, timeout=c.get("timeout", 10))

            def done(_f, i=i):
                with lock:
                    ranks[i] = len(ranks)
            f.add_done_callback(done)
            futures.append((f, decode))
        out = []
        for i, (f, decode) in enumerate(futures):
            try:
                a = self.answer(decode, f.result())
            except grpc.RpcError as e:
                a = self.answer(decode, err=e)
            out.append(a)
        for i, a in enumerate(out):
            with lock:
                a["rank"] = ranks.get(i, -1)
        return out


def main():
    target, desc, script = sys.argv[1:4]
    client = Client(target, desc)
    with open(script) as f:
        for line in f:
            if not line.strip():
                continue
            call = json.loads(line)
            if "align_ms" in call:
                now = time.time() * 1000
                period = call["align_ms"]
                time.sleep(((call.get("at", 0) - now) % period) / 1000)
                continue
            if "sleep_ms" in call:
                time.sleep(call["sleep_ms"] / 1000)
                continue
            if "parallel" in call:
                answers = client.parallel(call["parallel"])
            else:
                answers = [client.call(call) for _ in range(call.get("repeat", 1))]
            for a in answers:
                print(json.dumps(a, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
