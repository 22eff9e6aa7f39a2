# syntax=docker/dockerfile:1
# The stepgate image: the gateway (/stepgate, the entrypoint) and the example functions'
# server (/stepgate-examples), both static. See compose.yaml.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# The Go SDK's modules, which go.mod builds from this tree (replace): their go.mod files
# (client's has no go.sum: it requires nothing) before the download, the rest after.
COPY access/go.mod access/go.sum access/
COPY protocol/go.mod protocol/go.sum protocol/
COPY client/go.mod client/
COPY functions/go.mod functions/go.sum functions/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /stepgate ./cmd/stepgate \
 && CGO_ENABLED=0 go build -trimpath -o /stepgate-examples ./cmd/stepgate-examples

# Debian slim rather than distroless: it keeps a shell for compose's one-shot commands.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home stepgate
COPY --from=build /stepgate /stepgate-examples /
USER stepgate
EXPOSE 8080
ENTRYPOINT ["/stepgate"]
CMD ["serve"]
