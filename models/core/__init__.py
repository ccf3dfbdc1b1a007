"""The core every family runs on: the contract of a federated algorithm (`federated`), the round loop
(`rounds`), the aggregation pipeline (`pipeline`), general-form consensus ADMM (`consensus`), robust
aggregators (`aggregation`) and small linear algebra (`linalg`)."""
