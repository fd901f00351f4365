#!/bin/sh
# The script apache/kafka ships, so the compose file's health check is the same for both images.
exec java -Xmx96m -XX:TieredStopAtLevel=1 -Dlog4j.configuration=file:/opt/kafka/config/log4j.properties \
    -cp '/opt/kafka/libs/*' kafka.admin.BrokerApiVersionsCommand "$@"
