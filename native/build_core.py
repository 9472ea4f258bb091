"""cffi builder for echomq._core: the protocol's pure C core (emq_core.c), so the Python client
refuses bad input by the very rule the server applies."""

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))

# Warnings are errors in the project's own builds only (ECHOMQ_WERROR=1, as in setup.py).
WERROR = ["-Werror"] if os.environ.get("ECHOMQ_WERROR") == "1" else []

ffibuilder = FFI()
ffibuilder.cdef(
    """
    int emq_id_ok(const char *id, size_t len);
    int emq_lane_ok(const char *group, size_t len);
    int emq_parse_int(const char *s, size_t len, long long min, long long *out);
    int emq_parse_now(const char *s, size_t len, long long *out);
    int emq_parse_priority(const char *p, size_t n, long long *out);
    long long emq_pending_score(long long priority, long long t);
    """
)
ffibuilder.set_source(
    "echomq._core",
    '#include "emq_core.h"',
    sources=[os.path.relpath(os.path.join(HERE, "emq_core.c"))],
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=["-Wall", "-Wextra", *WERROR],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
