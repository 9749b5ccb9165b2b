"""The agent's own `/metrics`: the page of the last tick (dcgm-exporter's and node_exporter's
families from core/exposition/), `process_*`, and the kubelet's pod of each GPU."""
