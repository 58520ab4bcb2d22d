"""vcurve's agent adapters: processes that speak the agent process protocol (docs/agent-protocol.md).

- `protocol`: the agent side of the protocol (JSON lines on stdin/stdout), for any adapter.
- `scripted`: the scripted agent with a known V-curve, for the test task calc-1.
- `driver`: a stand-in for the worker that runs an agent against a local folder or a container,
  for tests and for trying an agent by hand.
"""
