#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver for the traces test (producer/tests/processes/fleet.rs), speaking the
protobuf freeway's exporter sends.

usage: receiver.py PORT OUT.jsonl    (needs opentelemetry-proto from PyPI; scripts/test.sh
                                      installs it in target/otlp-venv)

Answers POST /v1/traces (application/x-protobuf, gzip or not) and appends one JSON line per
span to OUT: trace_id, span_id, parent_span_id (hex; "" for a root), name, service and
attributes. It prints "listening" once it takes connections."""

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def plain(value):
    """An OTLP AnyValue as a plain Python value."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/traces":
            return self.send_error(404)
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        lines = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: plain(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "service": resource.get("service.name"),
                        "attributes": {kv.key: plain(kv.value) for kv in span.attributes},
                    }))
        with open(OUT, "a") as out:
            out.write("".join(line + "\n" for line in lines))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    OUT = sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("listening", flush=True)
    server.serve_forever()
