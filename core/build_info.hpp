#pragma once
namespace shapetune {
// Short git sha of the source this binary was built from, "-dirty" when it had uncommitted
// changes, "unknown" outside a git checkout. Defined in a file generated at build time.
const char* build_git_sha();
}
