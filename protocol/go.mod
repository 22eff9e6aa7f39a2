module github.com/stepgate/stepgate/protocol

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/oapi-codegen/runtime v1.9.0
	github.com/stepgate/stepgate/access v0.1.0
	github.com/stretchr/testify v1.12.1
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/stepgate/stepgate/access => ../access
