"""Faults and harsh conditions: a client killed between any two commands (crash points),
the chaos soak, worker and reaper processes under signals and SIGKILL, Redis restarted under
them, replication, Sentinel failovers, TLS, ACL users without scripting, a Redis Cluster,
races for the same messages, and pools past their limits."""
