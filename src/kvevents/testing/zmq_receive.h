// Test helpers for KV event subscribers (kv_events_publisher_test, tests/kv_events_engine_test):
// one multipart ZeroMQ message, and the big-endian sequence-number frame.
#pragma once

#include <zmq.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvserve::testing {

inline uint64_t FromBigEndian(const std::string& b) {
  uint64_t v = 0;
  for (char c : b) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

// One multipart message, or empty after `timeout_ms`.
inline std::vector<std::string> Receive(void* socket, int timeout_ms = 5000) {
  zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, 0) < 0) {
      zmq_msg_close(&msg);
      return {};
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return frames;
}

}  // namespace kvserve::testing
