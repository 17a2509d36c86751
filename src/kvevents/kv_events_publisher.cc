#include "kvevents/kv_events_publisher.h"

#include <zmq.h>

#include <chrono>
#include <cstring>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/logging.h"

namespace kvserve {

namespace {

using Json = nlohmann::json;

std::string BigEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

// Sends frames as one multipart message; false when ZeroMQ refused (e.g. the high-water mark).
bool SendFrames(void* socket, const std::vector<std::string_view>& frames, int flags = 0) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int more = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket, frames[i].data(), frames[i].size(), flags | more) < 0) return false;
  }
  return true;
}

// vLLM binds when the endpoint is a wildcard or a local transport, and connects otherwise.
bool ShouldBind(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

std::string LastEndpoint(void* socket, const std::string& fallback) {
  char buf[256];
  size_t size = sizeof(buf);
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf, &size) == 0 && size > 1) {
    return std::string(buf, size - 1);
  }
  return fallback;
}

}  // namespace

StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json_text) {
  const Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("--kv-events-config must be a JSON object, e.g. "
                                "'{\"enable_kv_cache_events\": true}'");
  }
  KvEventsConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    auto bad = [&](const char* want) {
      return InvalidArgumentError("--kv-events-config: '" + k + "' must be " + want);
    };
    if (k == "enable_kv_cache_events") {
      if (!v.is_boolean()) return bad("a boolean");
      c.enable_kv_cache_events = v.get<bool>();
    } else if (k == "publisher") {
      if (!v.is_null() && !(v.is_string() && (v == "zmq" || v == "null"))) {
        return bad("\"zmq\" or \"null\"");
      }
      if (v.is_string()) c.publisher = v.get<std::string>();
    } else if (k == "endpoint" || k == "topic") {
      if (!v.is_string()) return bad("a string");
      (k == "endpoint" ? c.endpoint : c.topic) = v.get<std::string>();
    } else if (k == "replay_endpoint") {
      if (!v.is_null() && !v.is_string()) return bad("a string or null");
      if (v.is_string()) c.replay_endpoint = v.get<std::string>();
    } else if (k == "buffer_steps" || k == "hwm" || k == "max_queue_size") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1) return bad("a positive integer");
      (k == "buffer_steps" ? c.buffer_steps : k == "hwm" ? c.hwm : c.max_queue_size) =
          v.get<int64_t>();
    } else {
      return InvalidArgumentError(
          "--kv-events-config: unknown field '" + k +
          "' (known: enable_kv_cache_events, publisher, endpoint, replay_endpoint, "
          "buffer_steps, hwm, max_queue_size, topic)");
    }
  }
  return c;
}

std::string EncodeKvEventBatch(double ts, const std::vector<KvCacheEvent>& events,
                               int64_t block_size, int64_t data_parallel_rank) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  auto pack_str = [&](std::string_view s) {
    pk.pack_str(static_cast<uint32_t>(s.size()));
    pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
  };
  auto pack_medium = [&](const KvCacheEvent& e) {
    if (e.medium.has_value()) {
      pack_str(*e.medium);
    } else {
      pk.pack_nil();
    }
  };
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvCacheEvent& e : events) {
    switch (e.kind) {
      case KvCacheEvent::Kind::kBlockStored:
        pk.pack_array(8);
        pack_str("BlockStored");
        pk.pack_array(static_cast<uint32_t>(e.block_hashes.size()));
        for (uint64_t h : e.block_hashes) pk.pack_uint64(h);
        if (e.parent_block_hash.has_value()) {
          pk.pack_uint64(*e.parent_block_hash);
        } else {
          pk.pack_nil();
        }
        pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
        for (TokenId t : e.token_ids) pk.pack_int32(t);
        pk.pack_int64(block_size);
        pk.pack_nil();  // lora_id
        pack_medium(e);
        pk.pack_nil();  // lora_name
        break;
      case KvCacheEvent::Kind::kBlockRemoved:
        pk.pack_array(3);
        pack_str("BlockRemoved");
        pk.pack_array(static_cast<uint32_t>(e.block_hashes.size()));
        for (uint64_t h : e.block_hashes) pk.pack_uint64(h);
        pack_medium(e);
        break;
      case KvCacheEvent::Kind::kAllBlocksCleared:
        pk.pack_array(1);
        pack_str("AllBlocksCleared");
        break;
    }
  }
  pk.pack_int64(data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

StatusOr<KvEventBatch> DecodeKvEventBatch(std::string_view payload) {
  try {
    msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
    const msgpack::object& b = oh.get();
    if (b.type != msgpack::type::ARRAY || b.via.array.size != 3 ||
        b.via.array.ptr[1].type != msgpack::type::ARRAY) {
      return InvalidArgumentError("a KV event batch is [ts, [events], data_parallel_rank]");
    }
    KvEventBatch out;
    out.ts = b.via.array.ptr[0].as<double>();
    out.data_parallel_rank = b.via.array.ptr[2].is_nil() ? 0 : b.via.array.ptr[2].as<int64_t>();
    const msgpack::object& events = b.via.array.ptr[1];
    for (uint32_t i = 0; i < events.via.array.size; ++i) {
      const msgpack::object& e = events.via.array.ptr[i];
      if (e.type != msgpack::type::ARRAY || e.via.array.size < 1) {
        return InvalidArgumentError("a KV event is an array with its type first");
      }
      const msgpack::object* f = e.via.array.ptr;
      const uint32_t n = e.via.array.size;
      const std::string tag = f[0].as<std::string>();
      KvCacheEvent ev;
      if (tag == "BlockStored" && n >= 5) {
        ev.kind = KvCacheEvent::Kind::kBlockStored;
        ev.block_hashes = f[1].as<std::vector<uint64_t>>();
        if (!f[2].is_nil()) ev.parent_block_hash = f[2].as<uint64_t>();
        ev.token_ids = f[3].as<std::vector<TokenId>>();
        if (n >= 7 && !f[6].is_nil()) ev.medium = f[6].as<std::string>();
      } else if (tag == "BlockRemoved" && n >= 2) {
        ev.kind = KvCacheEvent::Kind::kBlockRemoved;
        ev.block_hashes = f[1].as<std::vector<uint64_t>>();
        if (n >= 3 && !f[2].is_nil()) ev.medium = f[2].as<std::string>();
      } else if (tag == "AllBlocksCleared") {
        ev.kind = KvCacheEvent::Kind::kAllBlocksCleared;
      } else {
        return InvalidArgumentError("unknown KV event '" + tag + "'");
      }
      out.events.push_back(std::move(ev));
    }
    return out;
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("malformed KV event batch: ") + e.what());
  }
}

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config, int64_t block_size)
    : config_(config), block_size_(block_size) {}

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(const KvEventsConfig& config,
                                                                     int64_t block_size) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(config, block_size));
  if (config.publisher == "zmq") {
    Status opened = p->Open();
    if (!opened.ok()) return opened;
  }
  p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
  return p;
}

Status KvEventPublisher::Open() {
  context_ = zmq_ctx_new();
  if (context_ == nullptr) return InternalError("cannot create a ZeroMQ context");
  pub_ = zmq_socket(context_, ZMQ_PUB);
  const int hwm = static_cast<int>(std::min<int64_t>(config_.hwm, 1 << 30));
  const int linger_ms = 1000;  // on close, at most this long to flush
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(pub_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  const std::string& ep = config_.endpoint;
  const int rc = ShouldBind(ep) ? zmq_bind(pub_, ep.c_str()) : zmq_connect(pub_, ep.c_str());
  if (rc != 0) {
    return UnavailableError("KV events: cannot " + std::string(ShouldBind(ep) ? "bind" : "connect") +
                            " " + ep + ": " + zmq_strerror(zmq_errno()));
  }
  endpoint_ = LastEndpoint(pub_, ep);
  if (config_.replay_endpoint.has_value()) {
    replay_ = zmq_socket(context_, ZMQ_ROUTER);
    zmq_setsockopt(replay_, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
    if (zmq_bind(replay_, config_.replay_endpoint->c_str()) != 0) {
      return UnavailableError("KV events: cannot bind the replay endpoint " +
                              *config_.replay_endpoint + ": " + zmq_strerror(zmq_errno()));
    }
    replay_endpoint_ = LastEndpoint(replay_, *config_.replay_endpoint);
  }
  return OkStatus();
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (replay_ != nullptr) zmq_close(replay_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (context_ != nullptr) zmq_ctx_term(context_);
}

void KvEventPublisher::Publish(std::vector<KvCacheEvent> events) {
  if (events.empty()) return;
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(queue_.size()) >= config_.max_queue_size) {
      ++stats_.batches_dropped;
      return;
    }
    queue_.emplace_back(ts, std::move(events));
  }
  cv_.notify_one();
}

KvEventPublisher::Stats KvEventPublisher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KvEventPublisher::Loop() {
  while (true) {
    std::deque<std::pair<double, std::vector<KvCacheEvent>>> batches;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Replay requests are polled between waits: answered within about 20 ms.
      cv_.wait_for(lock, std::chrono::milliseconds(replay_ != nullptr ? 20 : 1000),
                   [&] { return stop_ || !queue_.empty(); });
      batches.swap(queue_);
      stopping = stop_;
    }
    if (!batches.empty()) {  // counted before sending: a subscriber that got one sees it
      int64_t num_events = 0;
      for (const auto& b : batches) num_events += static_cast<int64_t>(b.second.size());
      std::lock_guard<std::mutex> lock(mu_);
      stats_.batches_published += static_cast<int64_t>(batches.size());
      stats_.events_published += num_events;
    }
    for (auto& [ts, events] : batches) {
      std::string payload = EncodeKvEventBatch(ts, events, block_size_);
      const uint64_t seq = next_seq_++;
      if (pub_ != nullptr) {
        const std::string seq_bytes = BigEndian64(seq);
        if (!SendFrames(pub_, {config_.topic, seq_bytes, payload})) {
          KV_LOG(WARNING) << "KV events: batch " << seq << " not sent: " << zmq_strerror(zmq_errno());
        }
      }
      if (replay_ != nullptr) {
        sent_.emplace_back(seq, std::move(payload));
        while (static_cast<int64_t>(sent_.size()) > config_.buffer_steps) sent_.pop_front();
      }
    }
    if (replay_ != nullptr) ServeReplay();
    if (stopping) return;
  }
}

void KvEventPublisher::ServeReplay() {
  // A request is [identity, "", start sequence (8 bytes, big-endian)] (a REQ client's frames).
  while (true) {
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, replay_, frames.empty() ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&msg);
        return;  // nothing waiting
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    if (frames.size() != 3 || frames[2].size() != 8) {
      KV_LOG(WARNING) << "KV events: ignoring a malformed replay request (" << frames.size()
                      << " frames)";
      continue;
    }
    uint64_t start = 0;
    for (char c : frames[2]) start = (start << 8) | static_cast<unsigned char>(c);
    const std::string& id = frames[0];
    for (const auto& [seq, payload] : sent_) {
      if (seq < start) continue;
      const std::string seq_bytes = BigEndian64(seq);
      SendFrames(replay_, {id, "", config_.topic, seq_bytes, payload});
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.replays_served;  // before the end marker: a client that saw it sees the count
    }
    SendFrames(replay_, {id, "", "", BigEndian64(~uint64_t{0}), ""});
  }
}

}  // namespace kvserve
