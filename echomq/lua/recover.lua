--[[
  recover: expired leases go back where they came from.
    KEYS[1] <base>active     leased jobs, score = lease deadline (zset)
    KEYS[2] <base>pending    flat jobs ready to run (zset)
    KEYS[3] <base>ring       groups whose lanes are non-empty (list)
    KEYS[4] <base>wake       wake tokens (list)
    ARGV[1] now              ms, or * for the server clock
    ARGV[2] limit            integer >= 1, most leases taken
  Derived: <base>job:<id> of each expired lease, <base>lane:<group> of each lane job.
  A flat job returns to pending at its enqueued_at; a lane job to the head of its lane (latest
  deadline pushed first, so the lane keeps their order). Ghosts are dropped from active.
  Replies: :<jobs moved> | EMQARITY, EMQKEYS, EMQNUM, WRONGTYPE, NOPERM, TRYAGAIN errors.
]]
return move_due('RECOVER', 'active', true)
