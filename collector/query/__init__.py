"""The query service (nodes, alerts, history, jobs) behind the operator role, and server reflection
behind the same role."""
