module github.com/stepgate/stepgate/functions

go 1.26.0

require (
	github.com/stepgate/stepgate/client v0.1.0
	github.com/stepgate/stepgate/protocol v0.1.0
	github.com/stretchr/testify v1.12.1
	go.opentelemetry.io/otel v1.47.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/oapi-codegen/runtime v1.9.0 // indirect
	github.com/stepgate/stepgate/access v0.1.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace (
	github.com/stepgate/stepgate/access => ../access
	github.com/stepgate/stepgate/client => ../client
	github.com/stepgate/stepgate/protocol => ../protocol
)
