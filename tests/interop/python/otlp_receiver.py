"""An OTLP/HTTP receiver for the tracing tests: decodes what mcpmux exports with the
official OpenTelemetry protobuf definitions (opentelemetry-proto, pinned in
requirements.lock) and prints one JSON line per span and per metric on stdout.

Listens on 127.0.0.1 at a free port and prints `listening PORT` first. Lines:
  {"signal": "span", "service": ..., "name": ..., "kind": "SERVER", "traceId": hex,
   "spanId": hex, "parentSpanId": hex or "", "attributes": {...},
   "links": [{"traceId": hex, "spanId": hex}], "status": "ERROR" | "OK" | "UNSET"}
  {"signal": "metric", "service": ..., "name": ..., "points": N}
A body that does not decode gets 400 and a line {"signal": "error", ...}.
"""

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def emit(line):
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def spans(req):
    for rs in req.resource_spans:
        service = attrs(rs.resource.attributes).get("service.name")
        for ss in rs.scope_spans:
            for s in ss.spans:
                emit({
                    "signal": "span",
                    "service": service,
                    "name": s.name,
                    "kind": trace_pb2.Span.SpanKind.Name(s.kind).replace("SPAN_KIND_", ""),
                    "traceId": s.trace_id.hex(),
                    "spanId": s.span_id.hex(),
                    "parentSpanId": s.parent_span_id.hex(),
                    "attributes": attrs(s.attributes),
                    "links": [{"traceId": l.trace_id.hex(), "spanId": l.span_id.hex()}
                              for l in s.links],
                    "status": trace_pb2.Status.StatusCode.Name(s.status.code)
                    .replace("STATUS_CODE_", ""),
                })


def metrics(req):
    for rm in req.resource_metrics:
        service = attrs(rm.resource.attributes).get("service.name")
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                data = m.WhichOneof("data")
                points = len(getattr(m, data).data_points) if data else 0
                emit({"signal": "metric", "service": service, "name": m.name,
                      "points": points})


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        try:
            if self.path == "/v1/traces":
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                spans(req)
                reply = trace_service_pb2.ExportTraceServiceResponse()
            elif self.path == "/v1/metrics":
                req = metrics_service_pb2.ExportMetricsServiceRequest()
                req.ParseFromString(body)
                metrics(req)
                reply = metrics_service_pb2.ExportMetricsServiceResponse()
            else:
                self.send_error(404)
                return
        except Exception as e:  # noqa: BLE001 - reported, and the test fails on it
            emit({"signal": "error", "path": self.path, "error": str(e)})
            self.send_error(400)
            return
        out = reply.SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    emit_line = f"listening {server.server_address[1]}\n"
    sys.stdout.write(emit_line)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
