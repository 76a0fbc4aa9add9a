# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN GONOSUMDB=github.com/projectcalico go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/calico-rr-autoscaler ./cmd/calico-rr-autoscaler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/calico-rr-autoscaler /calico-rr-autoscaler
USER 65532:65532
ENTRYPOINT ["/calico-rr-autoscaler"]
