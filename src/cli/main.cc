// The `kvserve` binary: dispatches to the subcommands in commands.h.
#include "cli/commands.h"

int main(int argc, char** argv) { return kvserve::cli::RunKvserve(argc, argv); }
