# nginx.Dockerfile — an nginx image from the Debian base, for machines that cannot pull
# docker.io/library/nginx (scripts/docker-test.sh builds it; compose.yaml takes NGINX_IMAGE).
# Same layout as the official image: config at /etc/nginx/nginx.conf, nginx in the foreground.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nginx-light \
 && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/*
EXPOSE 8080
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
