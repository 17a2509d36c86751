// libmicrohttpd with the same stub routes and the same limits as beast_stub, for
// bench/http_layer_compare.sh: one epoll thread, a connection cap, a per-connection memory
// limit (headers), a 32 MiB body limit enforced in the upload callback, one idle timeout.
//   mhd_stub PORT MAX_CONNECTIONS
#include <microhttpd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stub_common.h"

#define MAX_BODY (32u << 20)

struct Upload {
  char* data;
  size_t size;
  int too_large;
};

static enum MHD_Result Reply(struct MHD_Connection* c, unsigned status, const char* body,
                             const char* type) {
  struct MHD_Response* r =
      MHD_create_response_from_buffer(strlen(body), (void*)body, MHD_RESPMEM_MUST_COPY);
  if (type) MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result Handle(void* cls, struct MHD_Connection* c, const char* url,
                              const char* method, const char* version, const char* upload,
                              size_t* upload_size, void** state) {
  (void)cls;
  (void)version;
  if (strcmp(method, "GET") == 0 && strcmp(url, "/health") == 0) return Reply(c, 200, "", NULL);
  if (strcmp(method, "POST") != 0 || strcmp(url, "/v1/completions") != 0) {
    return Reply(c, 404, "{\"error\":\"no route\"}", "application/json");
  }
  struct Upload* u = *state;
  if (u == NULL) {  // the header: the first call
    const char* length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (length != NULL && strtoull(length, NULL, 10) > MAX_BODY) {
      return Reply(c, 413, "{\"error\":\"body too large\"}", "application/json");
    }
    u = calloc(1, sizeof(*u));
    *state = u;
    return MHD_YES;
  }
  if (*upload_size != 0) {
    if (!u->too_large && u->size + *upload_size <= MAX_BODY) {
      u->data = realloc(u->data, u->size + *upload_size);
      memcpy(u->data + u->size, upload, *upload_size);
      u->size += *upload_size;
    } else {
      // Over the limit: answer now (libmicrohttpd then closes the connection after it).
      u->too_large = 1;
      free(u->data);
      u->data = NULL;
      *upload_size = 0;
      return Reply(c, 413, "{\"error\":\"body too large\"}", "application/json");
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (u->too_large) return Reply(c, 413, "{\"error\":\"body too large\"}", "application/json");
  char out[256];
  StubCompletion(u->data ? u->data : "", u->size, out, sizeof(out));
  return Reply(c, 200, out, "application/json");
}

static void Done(void* cls, struct MHD_Connection* c, void** state,
                 enum MHD_RequestTerminationCode code) {
  (void)cls;
  (void)c;
  (void)code;
  struct Upload* u = *state;
  if (u) free(u->data);
  free(u);
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  struct MHD_Daemon* d = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)atoi(argv[1]), NULL, NULL,
      &Handle, NULL, MHD_OPTION_CONNECTION_LIMIT, (unsigned)atoi(argv[2]),
      MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10),
      MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_NOTIFY_COMPLETED, &Done, NULL,
      MHD_OPTION_END);
  if (d == NULL) return 1;
  fprintf(stderr, "serve: HTTP: --max-connections %d, libmicrohttpd stub\n", atoi(argv[2]));
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGINT);
  sigprocmask(SIG_BLOCK, &s, NULL);
  int sig;
  sigwait(&s, &sig);
  MHD_stop_daemon(d);
  return 0;
}
