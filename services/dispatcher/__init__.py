"""The dispatcher: calls providers for OperationDispatched events and reports what it
saw as observations. It never decides state."""
