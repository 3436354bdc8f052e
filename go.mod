module github.com/agentry-dev/agentry

go 1.26.8

require go.uber.org/goleak v1.3.0

require github.com/google/jsonschema-go v0.4.3
