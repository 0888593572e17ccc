export { createMetrics, type LlmgwMetrics, type MetricsOptions } from './registry.js';
export { serveMetrics, type ServeMetricsOptions } from './http.js';
export { METRIC_NAMES, HISTOGRAM_NAMES, MODEL_STATES, MetricNames, baseMetricName, type MetricName } from './names.js';
export { certificateExpirySeconds, readCertificate, type CertificateReading } from './certificates.js';
export { type RouterMetrics, noRouterMetrics } from './ports.js';
export { parseExposition, findSamples, sampleValue, type Sample } from './parse.js';
