module github.com/stepgate/stepgate/client

go 1.26.0
