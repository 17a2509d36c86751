// OpenAiServer::handle_embeddings: POST /v1/embeddings. Parse and check (embeddings_api.h),
// tokenize each text as llama.cpp's embedding path does, embed in batches on the Embedder's own
// thread pool, answer in OpenAI's shape (float or base64).
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "server/embeddings_api.h"
#include "server/server.h"

namespace kvserve {

using openai::Json;

namespace {

// Most tokens one request may embed, summed over its inputs (OpenAI's limit).
constexpr int64_t kMaxEmbeddingTokensPerRequest = 300000;

}  // namespace

void OpenAiServer::handle_embeddings(const Request& req, Response& res, const Writer& writer) {
  const Embedder* embedder = options_.embedder.get();
  if (embedder == nullptr) {
    reply_error(res, 404,
                "this server has no embedding model: start it with --embedding-model PATH, or "
                "--model EMBEDDER (a bert GGUF file or Hugging Face folder)",
                "", "model_not_found");
    return;
  }
  auto parsed = openai::ParseJsonObject(req.body);
  if (!parsed.ok()) return reply_status(res, parsed.status());
  openai::ParamError perr;
  auto request = openai::ParseEmbeddingsRequest(*parsed, &perr);
  if (!request.ok()) return reply_status(res, request.status(), perr);
  if (!request->model.empty() && request->model != options_.embedding_model_name) {
    if (engine_ != nullptr && request->model == options_.served_model_name) {
      reply_error(res, 400,
                  "the model '" + request->model + "' generates text; embeddings come from '" +
                      options_.embedding_model_name + "'",
                  "model", "model_not_supported");
    } else {
      reply_error(res, 404,
                  "the model '" + request->model + "' does not exist; this server embeds with '" +
                      options_.embedding_model_name + "'",
                  "model", "model_not_found");
    }
    return;
  }
  if (request->dimensions.has_value() && *request->dimensions != embedder->dim()) {
    reply_error(res, 400,
                "'dimensions' is " + std::to_string(*request->dimensions) + "; the model '" +
                    options_.embedding_model_name + "' gives " + std::to_string(embedder->dim()),
                "dimensions");
    return;
  }

  // Token sequences: texts tokenized, id arrays used as they are.
  std::vector<std::vector<TokenId>> inputs;
  inputs.reserve(request->inputs.size());
  int64_t num_tokens = 0;
  const int64_t vocab_size = embedder->tokenizer().vocab_size();
  for (size_t i = 0; i < request->inputs.size(); ++i) {
    openai::EmbeddingInput& in = request->inputs[i];
    if (in.text.has_value()) {
      auto ids = embedder->Tokenize(*in.text, EmbedTruncation::kError);
      if (!ids.ok()) {
        reply_error(res, 400, "input " + std::to_string(i) + ": " + ids.status().message(),
                    "input");
        return;
      }
      inputs.push_back(*std::move(ids));
    } else {
      for (TokenId t : in.ids) {
        if (t >= vocab_size) {
          reply_error(res, 400,
                      "input " + std::to_string(i) + ": token id " + std::to_string(t) +
                          " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")",
                      "input");
          return;
        }
      }
      if (static_cast<int64_t>(in.ids.size()) > embedder->max_tokens()) {
        reply_error(res, 400,
                    "input " + std::to_string(i) + " has " + std::to_string(in.ids.size()) +
                        " tokens; the embedding model takes at most " +
                        std::to_string(embedder->max_tokens()),
                    "input");
        return;
      }
      inputs.push_back(std::move(in.ids));
    }
    num_tokens += static_cast<int64_t>(inputs.back().size());
    if (num_tokens > kMaxEmbeddingTokensPerRequest) {
      reply_error(res, 400,
                  "the inputs hold more than " + std::to_string(kMaxEmbeddingTokensPerRequest) +
                      " tokens; split the request",
                  "input");
      return;
    }
  }

  // Admission: the same in-flight bound (and drain on shutdown) as generation requests.
  std::string why;
  if (!try_admit(1, &why)) {
    reply_error(res, 503, why);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  // A client that leaves stops the work between batches (its answer would go nowhere).
  auto embeddings = embedder->Embed(inputs, [&writer] { return writer.client_gone(); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  release(1);
  if (!embeddings.ok()) return reply_status(res, embeddings.status());
  metrics_.record_embedding(/*api=*/true, static_cast<int64_t>(inputs.size()), num_tokens, seconds);
  res.content_type = "application/json";
  res.body = openai::Dump(openai::EmbeddingsResponse(*embeddings, request->base64,
                                                     options_.embedding_model_name, num_tokens));
}

}  // namespace kvserve
