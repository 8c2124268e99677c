# Written by `shapetune report`. Render: gnuplot DIR/plots/roofline_softmax_xent.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("roofline_softmax_xent.gp")]
data = here . "../data/"
reset
set terminal svg size 900,600 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "roofline_softmax_xent.svg"
set title "roofline: softmax_xent (measured ceilings only)"
set logscale xy
set xlabel "arithmetic intensity (FLOP/byte)"
set ylabel "achieved FLOP/s"
set grid
set key top left
set xrange [0.156252:5]
set yrange [1.40665e+08:8.52284e+13]
plot data . "roofline_softmax_xent_winners.dat" using 1:2 with points pt 7 ps 1.2 title "winner", \
     data . "roofline_softmax_xent_baselines.dat" using 1:2 with points pt 6 ps 1.2 title "best baseline", \
     4.26142e+12 * x with lines lw 2 title "DRAM copy ceiling (4.26 TB/s)"
