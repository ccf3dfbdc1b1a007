"""Private mode (issue 23): secure aggregation in the style of SecAgg+ (Bell et al. 2020), so that the coordinator
learns only the sum of a round's uploads. Pure protocol math: fixed-point encoding into a modular ring
(`fixedpoint`), Shamir secret sharing (`shamir`), the key agreement, share encryption and mask generator
(`crypto`, the `cryptography` package: the optional extra `fedsentry[private]`), and the protocol's client and
server steps (`secagg`), which the simulators run in process and the agents and coordinator over MQTT."""
