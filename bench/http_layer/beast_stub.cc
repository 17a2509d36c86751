// The HTTP layer of `kvserve serve` (src/http, Boost.Beast over Asio) with stub routes, for
// bench/http_layer_compare.sh: /health, POST /v1/completions (stub_common.h), GET /v1/models.
//   beast_stub PORT MAX_CONNECTIONS
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "http/http_server.h"

extern "C" {
#include "stub_common.h"
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: beast_stub PORT MAX_CONNECTIONS\n");
    return 2;
  }
  kvserve::http::HttpServerOptions o;
  o.port = std::atoi(argv[1]);
  o.max_connections = std::atoll(argv[2]);
  o.max_worker_threads = 64;
  kvserve::http::HttpServer server(o);
  using kvserve::http::HttpRequest;
  using kvserve::http::ResponseWriter;
  server.Route("GET", "/health", [](const HttpRequest&, ResponseWriter& w) { w.Send({200, "", {}, ""}); });
  server.Route("POST", "/v1/completions", [](const HttpRequest& req, ResponseWriter& w) {
    char out[256];
    const int n = StubCompletion(req.body.data(), req.body.size(), out, sizeof(out));
    w.Send({200, "application/json", {}, std::string(out, static_cast<size_t>(n))});
  });
  if (!server.Bind().ok()) return 1;
  std::fprintf(stderr, "serve: HTTP: --max-connections %lld, beast stub\n",
               static_cast<long long>(server.max_connections()));
  return server.Run().ok() ? 0 : 1;
}
