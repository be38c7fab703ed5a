// A uPlot line chart that follows its data: `series` is [{label, color}],
// `data` is [xs, ys1, ys2, …] as uPlot takes it. The chart is made once and
// fed new data with setData; it resizes with its box.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export function Chart({ title, series, data, height = 160, xLabel, timeAxis = false, yRange, testId }) {
  const box = useRef(null);
  const plot = useRef(null);

  useEffect(() => {
    const el = box.current;
    const opts = {
      width: Math.max(200, el.clientWidth),
      height,
      title,
      scales: { x: { time: timeAxis }, y: yRange ? { range: yRange } : {} },
      axes: [{ label: xLabel }, {}],
      legend: { live: true },
      series: [{ label: xLabel ?? 'x' }, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2, spanGaps: true, points: { show: s.points ?? false } }))],
    };
    plot.current = new uPlot(opts, data, el);
    const observer = new ResizeObserver(() => {
      const width = Math.max(200, el.clientWidth);
      if (plot.current && Math.abs(plot.current.width - width) > 1) plot.current.setSize({ width, height });
    });
    observer.observe(el);
    return () => {
      observer.disconnect();
      plot.current.destroy();
      plot.current = null;
    };
    // Made once per set of series; data changes go through setData below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [series.map((s) => s.label).join('|'), height]);

  useEffect(() => {
    if (plot.current) plot.current.setData(data);
  }, [data]);

  return <div class="chart" ref={box} data-testid={testId} data-points={data[0]?.length ?? 0} />;
}
