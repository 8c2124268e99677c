#include <iostream>

#include "cli/cli.hpp"
#include "harness/gpu_worker.hpp"

int main(int argc, char** argv) {
  shapetune::serve_gpu_worker_if_asked();  // when this process is a sweep's GPU worker, it ends here
  std::vector<std::string> args(argv + 1, argv + argc);
  return shapetune::run_cli(args, std::cout, std::cerr);
}
