"""What the operator and the agent of the operator-pool fixture share: the store's client
and the OperatorNode resource's layout."""
