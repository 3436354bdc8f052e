package durable

// WorkflowID is workflowID, for the tests that read a turn's history.
var WorkflowID = workflowID
