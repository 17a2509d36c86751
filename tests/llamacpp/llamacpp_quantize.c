// Test-only: quantizes a GGUF file with llama.cpp's own quantizer (llama_model_quantize in the
// prebuilt libllama that node-llama-cpp ships), so the cross-check can run kvserve on files that
// llama.cpp made. The library is opened at run time (dlopen): nothing links against it.
//
// Usage: llamacpp_quantize LIBLLAMA_SO INPUT.gguf OUTPUT.gguf FTYPE_ID
//   FTYPE_ID: llama.cpp's enum llama_ftype (2 Q4_0, 15 Q4_K_M, 17 Q5_K_M, 18 Q6_K, ...).
// Only the first two fields of llama_model_quantize_params (int32 nthread, enum llama_ftype
// ftype) are set; they have kept their place in every release. The rest comes from
// llama_model_quantize_default_params(), read into a buffer larger than any release's struct.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned char bytes[1024];  // larger than llama_model_quantize_params in any release
} ParamsBuffer;

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s LIBLLAMA_SO INPUT.gguf OUTPUT.gguf FTYPE_ID\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "llamacpp_quantize: cannot open %s: %s\n", argv[1], dlerror());
    return 1;
  }
  void (*backend_init)(void) = (void (*)(void))dlsym(lib, "llama_backend_init");
  ParamsBuffer (*default_params)(void) =
      (ParamsBuffer(*)(void))dlsym(lib, "llama_model_quantize_default_params");
  uint32_t (*quantize)(const char*, const char*, const void*) =
      (uint32_t(*)(const char*, const char*, const void*))dlsym(lib, "llama_model_quantize");
  if (backend_init == NULL || default_params == NULL || quantize == NULL) {
    fprintf(stderr, "llamacpp_quantize: %s lacks the llama_model_quantize API\n", argv[1]);
    return 1;
  }
  backend_init();
  ParamsBuffer params = default_params();
  const int32_t nthread = 1;
  const int32_t ftype = atoi(argv[4]);
  memcpy(params.bytes + 0, &nthread, sizeof nthread);
  memcpy(params.bytes + 4, &ftype, sizeof ftype);
  const uint32_t rc = quantize(argv[2], argv[3], params.bytes);
  if (rc != 0) {
    fprintf(stderr, "llamacpp_quantize: llama_model_quantize failed (%u)\n", rc);
    return 1;
  }
  return 0;
}
