#include <cstdio>

int main(int argc, char** argv) {
  std::fprintf(stderr, "kvserve: not built yet\n");
  return 1;
}
