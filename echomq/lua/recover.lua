--[[
  recover: expired leases go back where they came from, or to dead when their attempts are used up.
    KEYS[1] <base>active     leased jobs, score = lease deadline (zset)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>ring       groups whose lanes are non-empty (list)
    KEYS[4] <base>wake       wake tokens (list)
    KEYS[5] <base>dead       jobs that used up their attempts, score = time of death (zset)
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] limit            integer >= 1, most leases taken
    ARGV[3] max_attempts     integer >= 1
  Derived: <base>job:<id> of each expired lease, <base>lane:<group> of each lane job put back.
  A job whose attempts >= max_attempts (its worker was lost at its last attempt) goes to dead at
  now with the error 'lease expired during attempt <n>: the worker was lost'; its lane is left as
  it is. Otherwise a flat job returns to pending at its enqueued_at; a lane job to the head of its
  lane (latest deadline pushed first, so the lane keeps their order). Ghosts are dropped from
  active. One wake token per job put back to run.
  Replies: :<jobs taken: back to run or dead> | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM,
  TRYAGAIN errors.
]]
return move_due('RECOVER', 'active', true)
