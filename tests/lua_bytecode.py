"""The globals a Lua chunk reads and writes, from its bytecode as the server's own compiler gives it
(``string.dump(loadstring(source))`` run by EVAL): every GETGLOBAL and SETGLOBAL instruction of
every function in the chunk, with its source line. Lua 5.1's dump format (ldump.c)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

GETGLOBAL, SETGLOBAL = 5, 7
# EVAL's compiler, the chunk's text in ARGV[1]: the dump, or the compile error as the reply's error.
DUMP_SCRIPT = """
local chunk, err = loadstring(ARGV[1], '=' .. ARGV[2])
if chunk == nil then return redis.error_reply('ERR ' .. err) end
return string.dump(chunk)
"""
# Which of the names in ARGV are not globals of the server's script environment.
ABSENT_SCRIPT = """
local absent = {}
for i = 1, #ARGV do
  if rawget(_G, ARGV[i]) == nil then absent[#absent + 1] = ARGV[i] end
end
return absent
"""


@dataclass(frozen=True)
class GlobalUse:
    name: str
    line: int
    writes: bool


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0
        if data[:4] != b"\x1bLua" or data[4] != 0x51:
            raise ValueError("not a Lua 5.1 dump")
        int_size, self.size_t, instruction, number = data[7:11]
        if data[6] != 1 or int_size != 4 or instruction != 4 or number != 8:
            raise ValueError("a Lua 5.1 dump of another layout than little-endian 4/8/4/8")
        self.at = 12

    def take(self, n: int) -> bytes:
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def int(self) -> int:
        return int(struct.unpack("<i", self.take(4))[0])

    def string(self) -> bytes | None:
        n = int.from_bytes(self.take(self.size_t), "little")
        return None if n == 0 else self.take(n)[:-1]

    def function(self, found: list[GlobalUse]) -> None:
        self.string()  # source
        self.take(4 + 4 + 4)  # linedefined, lastlinedefined, nups/numparams/is_vararg/maxstack
        code = [int(struct.unpack("<I", self.take(4))[0]) for _ in range(self.int())]
        constants = [self.constant() for _ in range(self.int())]
        for _ in range(self.int()):
            self.function(found)
        lines = [self.int() for _ in range(self.int())]
        for _ in range(self.int()):  # locals: name, startpc, endpc
            self.string()
            self.take(8)
        for _ in range(self.int()):  # upvalue names
            self.string()
        for pc, instruction in enumerate(code):
            op = instruction & 0x3F
            if op in (GETGLOBAL, SETGLOBAL):
                name = constants[instruction >> 14]
                assert isinstance(name, bytes)
                found.append(GlobalUse(name.decode(), lines[pc], op == SETGLOBAL))

    def constant(self) -> object:
        kind = self.byte()
        if kind == 0:
            return None
        if kind == 1:
            return self.byte() != 0
        if kind == 3:
            return struct.unpack("<d", self.take(8))[0]
        if kind == 4:
            return self.string()
        raise ValueError(f"constant of type {kind}")


def global_uses(dump: bytes) -> list[GlobalUse]:
    """Every global read or write in the dumped chunk, in no particular order."""
    found: list[GlobalUse] = []
    _Reader(dump).function(found)
    return found
